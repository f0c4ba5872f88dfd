package storage

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// keyDump renders the live keys and the history: what a command that
// changes nothing leaves as it was (the applied index moves anyway).
func (ts *testSM) keyDump() []string {
	ts.t.Helper()
	return append(dumpRange(ts.t, ts.image(), prefixKV, prefixKV+1), dumpRange(ts.t, ts.image(), prefixHistory, prefixHistory+1)...)
}

// fillKeys puts n keys prefix%04d with values of size bytes, 100 a batch.
func fillKeys(ts *testSM, prefix string, n, size int) {
	ts.t.Helper()
	v := strings.Repeat("v", size)
	for i := 0; i < n; {
		var ops []command.Op
		for ; i < n && len(ops) < 100; i++ {
			ops = append(ops, putOp(fmt.Sprintf("%s%04d", prefix, i), v))
		}
		require.Equal(ts.t, command.StatusOK, ts.txn(command.Txn{Then: ops}).Status)
	}
}

// TestListPage: pages start strictly after After, hold at most Limit
// keys, stay under the prefix, and fail past MaxBytes having copied no
// more than the bound.
func TestListPage(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	fillKeys(ts, "p/", 100, 10)
	ts.put("o", "x")
	ts.put("q", "x")
	page := func(prefix string, p Page) []string {
		t.Helper()
		kvs, rev, err := ts.ListPage(prefix, p)
		require.NoError(t, err)
		require.Equal(t, ts.Revision(), rev)
		out := make([]string, len(kvs))
		for i, kv := range kvs {
			out[i] = kv.Key
		}
		return out
	}
	require.Len(t, page("p/", Page{}), 100)
	require.Equal(t, []string{"p/0000", "p/0001"}, page("p/", Page{Limit: 2}))
	require.Equal(t, []string{"p/0042", "p/0043"}, page("p/", Page{After: "p/0041", Limit: 2}))
	require.Equal(t, []string{"p/0099"}, page("p/", Page{After: "p/0098", Limit: 2}))
	require.Empty(t, page("p/", Page{After: "p/0099"}))
	require.Empty(t, page("p/", Page{After: "q"}), "after the prefix")
	require.Equal(t, []string{"p/0000"}, page("p/", Page{After: "o", Limit: 1}), "before the prefix")
	require.Equal(t, []string{"p/0000"}, page("p/", Page{After: "p/", Limit: 1}), "the prefix itself")
	require.Equal(t, []string{"o", "p/0000"}, page("", Page{Limit: 2}))

	one := command.ReadCost("p/0000", []byte("vvvvvvvvvv"))
	require.Len(t, page("p/", Page{MaxBytes: 100 * one}), 100, "exactly at the bound")
	_, _, err := ts.ListPage("p/", Page{MaxBytes: 100*one - 1})
	require.ErrorIs(t, err, ErrReadTooLarge)
	require.Contains(t, err.Error(), "after 99 keys")
	require.Len(t, page("p/", Page{MaxBytes: 10 * one, Limit: 10}), 10, "a page within the bound")
}

// TestReadTxn: a transaction without writes evaluates as Apply would, at
// one revision, with nothing applied, bounded by its byte bound.
func TestReadTxn(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	fillKeys(ts, "k/", 50, 100)
	txn := command.Txn{
		If:   []command.Compare{cmpInt64("k/0000", command.TargetVersion, command.Equal, 1)},
		Then: []command.Op{getOp("k/0001"), getPrefix("k/004")},
		Else: []command.Op{getOp("none")},
	}
	applied := ts.AppliedIndex()
	res, err := ts.ReadTxn(&txn, 0)
	require.NoError(t, err)
	require.Equal(t, applied, ts.AppliedIndex())
	// What the log would have said.
	want := ts.txn(txn)
	require.Equal(t, want.Succeeded, res.Succeeded)
	require.Equal(t, want.Rev, res.Rev)
	require.Len(t, res.Ops, 2)
	require.Equal(t, keysOf(want.Ops[0].KVs), keysOf(res.Ops[0].KVs))
	require.Equal(t, keysOf(want.Ops[1].KVs), keysOf(res.Ops[1].KVs))
	require.Len(t, res.Ops[1].KVs, 10)

	txn.If[0].Int = 2
	res, err = ts.ReadTxn(&txn, 0)
	require.NoError(t, err)
	require.False(t, res.Succeeded)
	require.Len(t, res.Ops, 1)
	require.Empty(t, res.Ops[0].KVs)

	all := make([]command.Op, 128)
	for i := range all {
		all[i] = getPrefix("")
	}
	_, err = ts.ReadTxn(&command.Txn{Then: all}, 64<<10)
	require.ErrorIs(t, err, ErrReadTooLarge)
	_, err = ts.ReadTxn(&command.Txn{Then: []command.Op{putOp("x", "y")}}, 0)
	require.Error(t, err, "a transaction that writes")
}

// TestTxnReadLimit: a transaction with a read limit whose branch's gets
// would read more fails with StatusReadTooLarge and changes nothing; its
// count includes what the branch puts and ignores what it deletes, and
// the proposer's check agrees with it.
func TestTxnReadLimit(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	fillKeys(ts, "q/", 10, 100)
	one := command.ReadCost("q/0000", []byte(strings.Repeat("v", 100)))
	before := ts.keyDump()
	rev := ts.Revision()

	over := command.Txn{Then: []command.Op{putOp("w", "x"), getPrefix("q/")}, ReadLimit: 10*one - 1}
	require.ErrorIs(t, ts.CheckTxnReads(&over), ErrReadTooLarge)
	res := ts.txn(over)
	require.Equal(t, command.StatusReadTooLarge, res.Status)
	require.Equal(t, rev, res.Rev)
	require.Equal(t, before, ts.keyDump(), "a refused transaction changed the state")

	// The branch's own put under the prefix counts; its delete does not
	// make room.
	put := command.Txn{Then: []command.Op{putOp("q/zz", "x"), getPrefix("q/")}, ReadLimit: 10 * one}
	require.ErrorIs(t, ts.CheckTxnReads(&put), ErrReadTooLarge)
	require.Equal(t, command.StatusReadTooLarge, ts.txn(put).Status)
	del := command.Txn{Then: []command.Op{delOp("q/0000"), putOp("w", "x"), getPrefix("q/")}, ReadLimit: 10*one - 1}
	require.Equal(t, command.StatusReadTooLarge, ts.txn(del).Status)
	require.Equal(t, before, ts.keyDump())
	require.Equal(t, rev, ts.Revision())

	fits := command.Txn{Then: []command.Op{putOp("w", "x"), getPrefix("q/")}, ReadLimit: 10 * one}
	require.NoError(t, ts.CheckTxnReads(&fits))
	res = ts.txn(fits)
	require.Equal(t, command.StatusOK, res.Status)
	require.Len(t, res.Ops[1].KVs, 10)
	// The limit is of the branch that runs.
	els := command.Txn{
		If:        []command.Compare{cmpInt64("w", command.TargetVersion, command.Equal, 0)},
		Then:      []command.Op{getPrefix("q/")},
		Else:      []command.Op{putOp("w", "y"), getOp("q/0001")},
		ReadLimit: one,
	}
	require.NoError(t, ts.CheckTxnReads(&els))
	res = ts.txn(els)
	require.Equal(t, command.StatusOK, res.Status)
	require.False(t, res.Succeeded)
	require.Len(t, res.Ops[1].KVs, 1)
}

// TestTxnDuplicateWriteFormats: a transaction with a read limit (format
// 6) that writes a key twice in a branch is invalid; in the formats
// before, it applies as it always did (the last write wins), so a log
// written by older members replays unchanged.
func TestTxnDuplicateWriteFormats(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	dup := command.Txn{Then: []command.Op{putOp("a", "1"), putOp("a", "2"), getPrefix("a")}, ReadLimit: 1 << 20}
	require.Equal(t, command.StatusInvalid, ts.txn(dup).Status)
	require.Empty(t, ts.keyDump())
	dup.Else, dup.Then = dup.Then, nil
	dup.If = []command.Compare{cmpInt64("a", command.TargetVersion, command.Equal, 5)}
	require.Equal(t, command.StatusInvalid, ts.txn(dup).Status, "in Else")
	dup.If = nil
	dup.Then, dup.Else = dup.Else, nil

	dup.ReadLimit = 0
	res := ts.txn(dup)
	require.Equal(t, command.StatusOK, res.Status)
	kv, ok := ts.get("a")
	require.True(t, ok)
	require.Equal(t, "2", string(kv.Value))
}

// TestApplyWithin: past its budget an apply stops with ErrApplyBudget
// and nothing applied; Apply then gives each command the outcome it
// would have had.
func TestApplyWithin(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	fillKeys(ts, "k/", 200, 100)
	one := command.ReadCost("k/0000", []byte(strings.Repeat("v", 100)))
	for name, c := range map[string]struct {
		txn  command.Txn
		want command.Status
	}{
		"unlimited prefix read": {command.Txn{Then: []command.Op{putOp("w", "1"), getPrefix("k/")}}, command.StatusOK},
		"read-limited":          {command.Txn{Then: []command.Op{putOp("w", "1"), getPrefix("k/")}, ReadLimit: 1 << 20}, command.StatusOK},
		"over its read limit": {command.Txn{Then: []command.Op{putOp("w", "1"), getPrefix("k/")}, ReadLimit: 100 * one},
			command.StatusReadTooLarge},
		"point reads": {command.Txn{Then: []command.Op{putOp("w", "1"), getOp("k/0001"), getOp("k/0002"), getOp("k/0003")}},
			command.StatusOK},
	} {
		before, applied := ts.dump(), ts.AppliedIndex()
		ents := ts.entries(txnCmd(command.Txn{Then: []command.Op{putOp("s", "1")}}), txnCmd(c.txn))
		_, err := ts.ApplyWithin(ents, nil, 2*one)
		require.ErrorIs(t, err, ErrApplyBudget, name)
		require.Equal(t, applied, ts.AppliedIndex(), name)
		require.Equal(t, before, ts.dump(), "%s: a stopped apply changed the state", name)
		out, err := ts.Apply(ents, nil)
		require.NoError(t, err, name)
		require.Len(t, out.Results, 2, name)
		require.Equal(t, c.want, out.Results[1].Result.Status, name)
	}
	out, err := ts.ApplyWithin(ts.entries(txnCmd(command.Txn{Then: []command.Op{putOp("w", "2"), getPrefix("k/000")}})), nil, 20*one)
	require.NoError(t, err, "within the budget")
	require.Len(t, out.Results[0].Result.Ops[1].KVs, 10)
}

// branchReadCost counts, for each get, the state's keys it finds and the
// branch's puts it would find, with few puts (scanned) and many (sorted)
// alike.
func TestBranchReadCost(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	keys := []string{"a", "a/", "a/b", "a/c", "ab", "b", "b/x", "c"}
	for _, k := range keys[:5] {
		ts.put(k, "vv")
	}
	s := ts.view.Load().memState
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range 5000 {
		ops := make([]command.Op, 1+r.IntN(20))
		for j := range ops {
			k := keys[r.IntN(len(keys))]
			switch r.IntN(3) {
			case 0:
				ops[j] = putOp(k, strings.Repeat("x", r.IntN(5)))
			case 1:
				ops[j] = getOp(k)
			default:
				ops[j] = getPrefix(k[:r.IntN(len(k)+1)])
			}
		}
		var want int64
		for _, op := range ops {
			if op.Type != command.OpGet {
				continue
			}
			match := func(k string) bool { return k == op.Key || op.Prefix && strings.HasPrefix(k, op.Key) }
			for _, k := range keys[:5] {
				if match(k) {
					want += command.ReadCost(k, []byte("vv"))
				}
			}
			for _, p := range ops {
				if p.Type == command.OpPut && match(p.Key) {
					want += command.ReadCost(p.Key, p.Value)
				}
			}
		}
		require.Equal(t, want, branchReadCost(s, ops, math.MaxInt64), "seed %d, case %d: %+v", seed, i, ops)
	}
}
