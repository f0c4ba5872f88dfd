package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

func rangeKeys(t testing.TB, ts *testSM, r RangeRead) []string {
	t.Helper()
	res, err := ts.Range(r)
	require.NoError(t, err)
	return namesOf(res.KVs)
}

func namesOf(kvs []command.KV) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

// A key put, deleted and created again across the revision read at is
// seen as it was then, whichever of its changes came after.
func TestRangeAtRevRebuildsKeys(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "a1")                                   // 1
	ts.put("b", "b1")                                   // 2
	ts.txn(command.Txn{Then: []command.Op{delOp("a")}}) // 3
	ts.put("c", "c1")                                   // 4
	ts.put("a", "a2")                                   // 5: a again, a new life
	ts.put("b", "b2")                                   // 6
	ts.txn(command.Txn{Then: []command.Op{delOp("c")}}) // 7

	all := RangeRead{Start: "", End: NoEnd}
	at := func(rev int64) []command.KV {
		r := all
		r.Rev = rev
		res, err := ts.Range(r)
		require.NoError(t, err, "rev %d", rev)
		require.EqualValues(t, 7, res.Rev, "the header revision is the current one")
		return res.KVs
	}
	kv := func(k, v string, ver, create, mod int64) command.KV {
		return command.KV{Key: k, Value: []byte(v), Version: ver, CreateRev: create, ModRev: mod}
	}
	require.Equal(t, []command.KV{kv("a", "a1", 1, 1, 1)}, at(1))
	require.Equal(t, []command.KV{kv("a", "a1", 1, 1, 1), kv("b", "b1", 1, 2, 2)}, at(2))
	require.Equal(t, []command.KV{kv("b", "b1", 1, 2, 2)}, at(3))
	require.Equal(t, []command.KV{kv("b", "b1", 1, 2, 2), kv("c", "c1", 1, 4, 4)}, at(4))
	require.Equal(t, []command.KV{kv("a", "a2", 1, 5, 5), kv("b", "b1", 1, 2, 2), kv("c", "c1", 1, 4, 4)}, at(5))
	require.Equal(t, []command.KV{kv("a", "a2", 1, 5, 5), kv("b", "b2", 2, 2, 6)}, at(7))
	require.Equal(t, at(0), at(7), "0 reads the current state")

	_, err := ts.Range(RangeRead{End: NoEnd, Rev: 8})
	require.ErrorIs(t, err, ErrFutureRev)
}

// A past range, paged and limited, with the keys deleted since inside
// it: they are returned where they sorted, and live keys created since
// are not.
func TestRangeAtRevCrossingDeletes(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	for i := range 10 {
		ts.put(fmt.Sprintf("k%d", i), "v")
	}
	rev := ts.Revision()
	ts.txn(command.Txn{Then: []command.Op{delOp("k2"), delOp("k3"), delOp("k7")}})
	ts.put("k25", "new")
	ts.put("k9", "changed")
	r := RangeRead{Start: "k1", End: "k8", Rev: rev}
	require.Equal(t, []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7"}, rangeKeys(t, ts, r))
	r.Limit, r.After = 3, "k2"
	require.Equal(t, []string{"k3", "k4", "k5"}, rangeKeys(t, ts, r))
	r.Count = true
	res, err := ts.Range(r)
	require.NoError(t, err)
	require.EqualValues(t, 5, res.Count, "k3..k7 match after k2")
	r = RangeRead{Start: "k", End: "l", Rev: rev, Sort: SortKey, Descend: true, Limit: 2}
	require.Equal(t, []string{"k9", "k8"}, rangeKeys(t, ts, r))
	res, err = ts.Range(RangeRead{Start: "k9", End: "k9\x00", Rev: rev})
	require.NoError(t, err)
	require.Equal(t, "v", string(res.KVs[0].Value))
	// Now, the same range has its live keys.
	require.Equal(t, []string{"k1", "k25", "k4", "k5", "k6"}, rangeKeys(t, ts, RangeRead{Start: "k1", End: "k7"}))
}

// The compaction boundary is the watch's: a read at oldest-1 is served,
// one below it is a *CompactedError.
func TestRangeAtRevCompactionBoundary(t *testing.T) {
	t.Parallel()
	const window = 5
	ts := openTestSM(t, nil, Options{HistoryRevisions: window})
	for i := range 3 * int(historyChunk(window)) {
		ts.put(fmt.Sprintf("k%d", i%4), fmt.Sprint(i))
	}
	oldest := ts.OldestRevision()
	require.Greater(t, oldest, int64(2))
	res, err := ts.Range(RangeRead{End: NoEnd, Rev: oldest - 1})
	require.NoError(t, err)
	require.Len(t, res.KVs, 4)
	_, err = ts.Range(RangeRead{End: NoEnd, Rev: oldest - 2})
	require.ErrorIs(t, err, ErrCompacted)
	var ce *CompactedError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, oldest, ce.Oldest)
}

// A read of the past pays for the history it decodes: a small result
// over a long history fails at its bound, and fits a larger one.
func TestRangeAtRevCostBound(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("small", "x")
	rev := ts.Revision()
	big := strings.Repeat("v", 1000)
	for i := range 50 {
		ts.put(fmt.Sprintf("other%d", i), big)
	}
	_, err := ts.Range(RangeRead{Start: "small", End: "small\x00", Rev: rev, MaxBytes: 8 << 10})
	require.ErrorIs(t, err, ErrReadTooLarge)
	res, err := ts.Range(RangeRead{Start: "small", End: "small\x00", Rev: rev, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Len(t, res.KVs, 1)
	// Counting walks every key, each at its key's cost.
	_, err = ts.Range(RangeRead{Start: "other", End: "otherz", CountOnly: true, MaxBytes: 10 * 64})
	require.ErrorIs(t, err, ErrReadTooLarge)
	res, err = ts.Range(RangeRead{Start: "other", End: "otherz", CountOnly: true, MaxBytes: 100 * 64})
	require.NoError(t, err)
	require.EqualValues(t, 50, res.Count)
	require.Empty(t, res.KVs)
}

// Keys only, count only, sort and the revision filters, as etcd's Range.
func TestRangeOptions(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "3") // 1
	ts.put("b", "1") // 2
	ts.put("c", "2") // 3
	ts.put("a", "9") // 4
	res, err := ts.Range(RangeRead{End: NoEnd, KeysOnly: true, Count: true, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, namesOf(res.KVs))
	require.Nil(t, res.KVs[0].Value)
	require.EqualValues(t, 3, res.Count)
	require.Equal(t, []string{"b", "c", "a"}, rangeKeys(t, ts, RangeRead{End: NoEnd, Sort: SortValue}))
	require.Equal(t, []string{"c"}, rangeKeys(t, ts, RangeRead{End: NoEnd, Sort: SortCreateRev, Descend: true, Limit: 1}))
	require.Equal(t, []string{"a"}, rangeKeys(t, ts, RangeRead{End: NoEnd, Sort: SortModRev, Descend: true, Limit: 1}))
	require.Equal(t, []string{"a", "c", "b"}, rangeKeys(t, ts, RangeRead{End: NoEnd, Sort: SortVersion, Descend: true}),
		"ties stay in reverse key order")
	require.Equal(t, []string{"b"}, rangeKeys(t, ts, RangeRead{End: NoEnd, MaxCreateRev: 2, MinCreateRev: 2}))
	require.Equal(t, []string{"a", "c"}, rangeKeys(t, ts, RangeRead{End: NoEnd, MinModRev: 3}))
	require.Equal(t, []string{"b"}, rangeKeys(t, ts, RangeRead{Start: "b", End: "c"}))
	require.Empty(t, rangeKeys(t, ts, RangeRead{Start: "c", End: "b"}))
	// mutex's WithLastCreate and WithMaxCreateRev: the newest waiter before mine.
	res, err = ts.Range(RangeRead{End: NoEnd, Sort: SortCreateRev, Descend: true, Limit: 1, MaxCreateRev: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, namesOf(res.KVs))
}

// A random history, read at every revision, equals a replay of it.
func TestRangeAtRevMatchesReplay(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	ts := openTestSM(t, nil, Options{})
	states := []map[string]string{{}}
	cur := map[string]string{}
	for range 120 {
		k := fmt.Sprintf("k%d", rng.IntN(12))
		if rng.IntN(3) == 0 {
			if _, ok := cur[k]; !ok {
				continue
			}
			ts.txn(command.Txn{Then: []command.Op{delOp(k)}})
			delete(cur, k)
		} else {
			v := fmt.Sprint(rng.IntN(1000))
			ts.put(k, v)
			cur[k] = v
		}
		next := make(map[string]string, len(cur))
		for k, v := range cur {
			next[k] = v
		}
		states = append(states, next)
	}
	require.EqualValues(t, len(states)-1, ts.Revision(), "seed %d", seed)
	for rev := int64(1); rev < int64(len(states)); rev++ {
		res, err := ts.Range(RangeRead{Start: "k1", End: "k7", Rev: rev})
		require.NoError(t, err, "seed %d", seed)
		var keys, want []string
		for k := range states[rev] {
			if k >= "k1" && k < "k7" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			want = append(want, k+"="+states[rev][k])
		}
		var got []string
		for _, kv := range res.KVs {
			got = append(got, kv.Key+"="+string(kv.Value))
			require.LessOrEqual(t, kv.ModRev, rev, "seed %d", seed)
		}
		require.Equal(t, want, got, "seed %d rev %d", seed, rev)
	}
}

// The keys a session's end deleted are back in a read before it; a
// history record of format 1 (no previous states, from an older build)
// cannot be read past: a *CompactedError naming the first revision
// after it.
func TestRangeAtRevSessionEndAndFormat1(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	id := ts.newSession()
	ts.txn(command.Txn{Then: []command.Op{ephemeralPut("e1", "x", id), ephemeralPut("e2", "y", id)}})
	before := ts.Revision()
	ts.endSession(id)
	require.Empty(t, rangeKeys(t, ts, RangeRead{End: NoEnd}))
	require.Equal(t, []string{"e1", "e2"}, rangeKeys(t, ts, RangeRead{End: NoEnd, Rev: before}))

	ts.put("k", "v1")
	old := ts.Revision()
	ts.put("k", "v2")
	// Rewrite that last record as an older build wrote it.
	b := []byte{historyFormat1}
	b = binary.AppendUvarint(b, 1)
	b = append(b, byte(EventPut))
	b = binary.AppendUvarint(b, 1)
	b = append(b, 'k')
	b = binary.AppendUvarint(b, 2)
	b = append(b, "v2"...)
	for _, v := range []uint64{2, uint64(old), 0} {
		b = binary.AppendUvarint(b, v)
	}
	require.NoError(t, ts.image().Set(appendHistoryKey(nil, old+1), b, nil))
	_, err := ts.Range(RangeRead{End: NoEnd, Rev: old})
	var ce *CompactedError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, old+2, ce.Oldest)
	require.Equal(t, []string{"k"}, rangeKeys(t, ts, RangeRead{End: NoEnd, Rev: old + 1}))
}

// BenchmarkRangeAtRev reads 100 keys as of 1,000 revisions back, over
// 10,000 live keys: the cost is the history walked, not the key space.
func BenchmarkRangeAtRev(b *testing.B) {
	ts := openTestSM(b, nil, Options{})
	for i := 0; i < 10_000; i += 100 {
		var ops []command.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, putOp(fmt.Sprintf("k%05d", j), "value"))
		}
		ts.txn(command.Txn{Then: ops})
	}
	rev := ts.Revision()
	for i := range 1000 {
		ts.put(fmt.Sprintf("k%05d", i*10), "changed")
	}
	r := RangeRead{Start: "k00100", End: "k00200", Rev: rev, MaxBytes: 4 << 20}
	b.ReportAllocs()
	for b.Loop() {
		res, err := ts.Range(r)
		if err != nil || len(res.KVs) != 100 || string(res.KVs[0].Value) != "value" {
			b.Fatalf("%v %d", err, len(res.KVs))
		}
	}
}
