package storage

import (
	"fmt"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

func TestTxnPutGetDelete(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})

	kv := ts.put("a", "1")
	require.Equal(t, command.KV{Key: "a", Value: []byte("1"), Version: 1, CreateRev: 1, ModRev: 1}, kv)
	require.EqualValues(t, 1, ts.Revision())

	kv = ts.put("a", "2")
	require.Equal(t, command.KV{Key: "a", Value: []byte("2"), Version: 2, CreateRev: 1, ModRev: 2}, kv)
	got, ok := ts.get("a")
	require.True(t, ok)
	require.Equal(t, kv, got)

	res := ts.txn(command.Txn{Then: []command.Op{getOp("a"), getOp("missing")}})
	require.Equal(t, command.StatusOK, res.Status)
	require.True(t, res.Succeeded)
	require.EqualValues(t, 2, res.Rev)
	require.Equal(t, []command.KV{kv}, res.Ops[0].KVs)
	require.Empty(t, res.Ops[1].KVs)

	res = ts.txn(command.Txn{Then: []command.Op{delOp("a")}})
	require.EqualValues(t, 1, res.Ops[0].Deleted)
	require.EqualValues(t, 3, res.Rev)
	_, ok = ts.get("a")
	require.False(t, ok)

	// Recreated keys start over: version 1, a new create revision.
	kv = ts.put("a", "3")
	require.Equal(t, command.KV{Key: "a", Value: []byte("3"), Version: 1, CreateRev: 4, ModRev: 4}, kv)
}

func TestTxnCompareTargets(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("x", "old")                     // rev 1
	ts.put("k", "m")                       // rev 2
	ts.put("k", "m")                       // rev 3: k version 2, create 2, mod 3
	sid := ts.newSession()                 // index 4
	ts.txn(command.Txn{Then: []command.Op{ // rev 4
		ephemeralPut("e", "v", sid),
	}})

	V, C, M, S := command.TargetVersion, command.TargetCreateRev, command.TargetModRev, command.TargetSession
	EQ, NE, LT, GT := command.Equal, command.NotEqual, command.Less, command.Greater
	cases := []struct {
		c    command.Compare
		want bool
	}{
		{cmpInt64("k", V, EQ, 2), true},
		{cmpInt64("k", V, NE, 2), false},
		{cmpInt64("k", V, LT, 3), true},
		{cmpInt64("k", V, GT, 1), true},
		{cmpInt64("k", V, GT, 2), false},
		{cmpInt64("k", C, EQ, 2), true},
		{cmpInt64("k", C, LT, 2), false},
		{cmpInt64("k", M, EQ, 3), true},
		{cmpInt64("k", M, GT, 2), true},
		{cmpInt64("k", S, EQ, 0), true},
		{cmpInt64("e", S, EQ, sid), true},
		{cmpInt64("e", S, NE, sid), false},
		{cmpValue("k", EQ, "m"), true},
		{cmpValue("k", LT, "n"), true},
		{cmpValue("k", GT, "l"), true},
		{cmpValue("k", GT, "m"), false},
		{cmpValue("k", NE, "m"), false},
		{cmpValue("k", LT, "ma"), true}, // a prefix sorts first
		// An absent key has zero fields and a nil value.
		{cmpInt64("none", V, EQ, 0), true},
		{cmpInt64("none", C, EQ, 0), true},
		{cmpInt64("none", M, EQ, 0), true},
		{cmpInt64("none", S, EQ, 0), true},
		{cmpInt64("none", V, GT, -1), true},
		{cmpValue("none", EQ, ""), true},
		{cmpValue("none", LT, "a"), true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d/%d/%d%s", tc.c.Key, tc.c.Target, tc.c.Op, tc.c.Int, tc.c.Value), func(t *testing.T) {
			res := ts.txn(command.Txn{If: []command.Compare{tc.c}})
			require.Equal(t, command.StatusOK, res.Status)
			require.Equal(t, tc.want, res.Succeeded)
			require.EqualValues(t, 4, res.Rev)
		})
	}
}

func TestTxnBranches(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	then := []command.Op{putOp("then", "t"), getOp("a")}
	els := []command.Op{putOp("else", "e")}

	// Every compare must hold for Then to run.
	res := ts.txn(command.Txn{
		If:   []command.Compare{cmpValue("a", command.Equal, "1"), cmpInt64("a", command.TargetVersion, command.Equal, 2)},
		Then: then, Else: els,
	})
	require.False(t, res.Succeeded)
	require.Len(t, res.Ops, 1)
	require.Equal(t, "else", res.Ops[0].KVs[0].Key)
	_, ok := ts.get("then")
	require.False(t, ok)

	res = ts.txn(command.Txn{
		If:   []command.Compare{cmpValue("a", command.Equal, "1"), cmpInt64("a", command.TargetVersion, command.Equal, 1)},
		Then: then, Else: els,
	})
	require.True(t, res.Succeeded)
	require.Len(t, res.Ops, 2)
	require.Equal(t, "then", res.Ops[0].KVs[0].Key)
	require.Equal(t, []string{"a=1"}, keysOf(res.Ops[1].KVs))

	// No compares: Then runs.
	res = ts.txn(command.Txn{Then: []command.Op{getOp("a")}, Else: els})
	require.True(t, res.Succeeded)
}

func TestTxnReadsOwnWrites(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("p/b", "old")
	res := ts.txn(command.Txn{Then: []command.Op{
		putOp("p/a", "1"),
		getOp("p/a"),
		putOp("p/a", "2"),
		getOp("p/a"),
		delOp("p/b"),
		getOp("p/b"),
		putOp("p/c", "3"),
		getPrefix("p/"),
	}})
	require.Equal(t, command.StatusOK, res.Status)
	require.EqualValues(t, 2, res.Rev)
	require.Equal(t, []string{"p/a=1"}, keysOf(res.Ops[1].KVs))
	require.Equal(t, []command.KV{{Key: "p/a", Value: []byte("2"), Version: 2, CreateRev: 2, ModRev: 2}}, res.Ops[3].KVs)
	require.Empty(t, res.Ops[5].KVs)
	require.Equal(t, []string{"p/a=2", "p/c=3"}, keysOf(res.Ops[7].KVs))
}

func TestTxnSeesEarlierEntriesOfTheBatch(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	create := func(v string) *command.Command {
		return txnCmd(command.Txn{
			If:   []command.Compare{cmpInt64("k", command.TargetVersion, command.Equal, 0)},
			Then: []command.Op{putOp("k", v)},
			Else: []command.Op{getOp("k")},
		})
	}
	out := ts.apply(create("first"), create("second"), txnCmd(command.Txn{Then: []command.Op{getPrefix("")}}))
	require.Len(t, out.Results, 3)
	require.True(t, out.Results[0].Result.Succeeded)
	require.False(t, out.Results[1].Result.Succeeded)
	require.Equal(t, []string{"k=first"}, keysOf(out.Results[1].Result.Ops[0].KVs))
	require.Equal(t, []string{"k=first"}, keysOf(out.Results[2].Result.Ops[0].KVs))
	require.EqualValues(t, 1, ts.Revision())
}

func TestTxnMultiOpOneRevision(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("c", "gone soon")
	out := ts.apply(txnCmd(command.Txn{Then: []command.Op{
		putOp("a", "1"), putOp("b", "2"), delOp("c"), delOp("never"),
	}}))
	res := out.Results[0].Result
	require.EqualValues(t, 2, res.Rev)
	require.EqualValues(t, 2, ts.Revision())
	for _, k := range []string{"a", "b"} {
		kv, _ := ts.get(k)
		require.EqualValues(t, 2, kv.ModRev)
		require.EqualValues(t, 2, kv.CreateRev)
	}
	require.EqualValues(t, 1, res.Ops[2].Deleted)
	require.EqualValues(t, 0, res.Ops[3].Deleted)

	want := []Revision{{Rev: 2, Events: []Event{
		{Type: EventPut, KV: command.KV{Key: "a", Value: []byte("1"), Version: 1, CreateRev: 2, ModRev: 2}},
		{Type: EventPut, KV: command.KV{Key: "b", Value: []byte("2"), Version: 1, CreateRev: 2, ModRev: 2}},
		{Type: EventDelete, KV: command.KV{Key: "c", Version: 1, CreateRev: 1, ModRev: 2},
			Prev: &command.KV{Key: "c", Value: []byte("gone soon"), Version: 1, CreateRev: 1, ModRev: 1}},
	}}}
	require.Equal(t, want, out.Changes)
	hist, err := ts.History(1, 0)
	require.NoError(t, err)
	require.Equal(t, want, hist)
}

func TestTxnWithoutWritesKeepsRevision(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	for _, txn := range []command.Txn{
		{},
		{Then: []command.Op{getOp("a"), getPrefix("")}},
		{Then: []command.Op{delOp("absent"), delPrefix("nothing/")}},
		{If: []command.Compare{cmpInt64("a", command.TargetVersion, command.Equal, 9)}, Then: []command.Op{putOp("b", "")}},
	} {
		out := ts.apply(txnCmd(txn))
		require.EqualValues(t, 1, out.Results[0].Result.Rev)
		require.Empty(t, out.Changes)
	}
	require.EqualValues(t, 1, ts.Revision())
	hist, err := ts.History(0, 0)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	// An absent Txn is an empty one.
	require.Equal(t, command.StatusOK, ts.do(&command.Command{Kind: command.KindTxn}).Status)
}

// TestTxnCAS is the compare-and-set that IfVersion builds on.
func TestTxnCAS(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	cas := func(version int64, value string) command.Result {
		return ts.txn(command.Txn{
			If:   []command.Compare{cmpInt64("cfg", command.TargetVersion, command.Equal, version)},
			Then: []command.Op{putOp("cfg", value)},
			Else: []command.Op{getOp("cfg")},
		})
	}
	require.True(t, cas(0, "v1").Succeeded) // create only if absent
	require.False(t, cas(0, "again").Succeeded)
	require.True(t, cas(1, "v2").Succeeded)
	res := cas(1, "stale")
	require.False(t, res.Succeeded)
	require.Equal(t, []string{"cfg=v2"}, keysOf(res.Ops[0].KVs)) // the loser learns the winner
	kv, _ := ts.get("cfg")
	require.Equal(t, "v2", string(kv.Value))
	require.EqualValues(t, 2, kv.Version)
}

func TestTxnPrefixOps(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	for _, k := range []string{"a/2", "a/1", "a/3", "a0", "a", "b/1"} {
		ts.put(k, k)
	}
	res := ts.txn(command.Txn{Then: []command.Op{getPrefix("a/")}})
	require.Equal(t, []string{"a/1=a/1", "a/2=a/2", "a/3=a/3"}, keysOf(res.Ops[0].KVs))

	kvs, rev, err := ts.List("a")
	require.NoError(t, err)
	require.EqualValues(t, 6, rev)
	require.Equal(t, []string{"a=a", "a/1=a/1", "a/2=a/2", "a/3=a/3", "a0=a0"}, keysOf(kvs))

	out := ts.apply(txnCmd(command.Txn{Then: []command.Op{delPrefix("a/")}}))
	require.EqualValues(t, 3, out.Results[0].Result.Ops[0].Deleted)
	require.EqualValues(t, 7, out.Results[0].Result.Rev)
	require.Len(t, out.Changes, 1)
	require.Len(t, out.Changes[0].Events, 3)
	for i, ev := range out.Changes[0].Events {
		require.Equal(t, EventDelete, ev.Type)
		require.Equal(t, fmt.Sprintf("a/%d", i+1), ev.KV.Key)
		require.EqualValues(t, 7, ev.KV.ModRev)
	}
	kvs, _, err = ts.List("")
	require.NoError(t, err)
	require.Equal(t, []string{"a=a", "a0=a0", "b/1=b/1"}, keysOf(kvs))

	// The empty prefix is everything.
	res = ts.txn(command.Txn{Then: []command.Op{delPrefix("")}})
	require.EqualValues(t, 3, res.Ops[0].Deleted)
	kvs, rev, err = ts.List("")
	require.NoError(t, err)
	require.Empty(t, kvs)
	require.EqualValues(t, 8, rev)
}

func TestTxnInvalidChangesNothing(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	before := ts.dump()
	for _, txn := range []command.Txn{
		{Then: []command.Op{putOp("b", "2"), {Type: 9, Key: "x"}}},
		{Then: []command.Op{putOp("b", "2"), {Type: command.OpPut, Key: "p/", Prefix: true}}},
		{If: []command.Compare{{Key: "a", Target: 0, Op: command.Equal}}, Then: []command.Op{putOp("b", "2")}},
		{If: []command.Compare{{Key: "a", Target: command.TargetVersion, Op: 7}}, Then: []command.Op{putOp("b", "2")}},
		// The branch that would not run is checked too: validity does not
		// depend on the state.
		{Then: []command.Op{putOp("b", "2")}, Else: []command.Op{{Type: 0}}},
	} {
		res := ts.txn(txn)
		require.Equal(t, command.StatusInvalid, res.Status)
		require.EqualValues(t, 1, res.Rev)
	}
	// Only the meta record (the applied index) moved.
	after := ts.dump()
	require.Equal(t, before[1:], after[1:])
	require.EqualValues(t, 1, ts.Revision())
}
