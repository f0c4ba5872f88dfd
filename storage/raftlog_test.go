package storage

import (
	"flag"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The raft.Storage contract, case by case. The tables follow raft's own
// storage_test.go (MemoryStorage), so both implementations answer alike.

func TestRaftLogTerm(t *testing.T) {
	t.Parallel()
	ents := index(3).terms(3, 4, 5)
	for _, tt := range []struct {
		i     uint64
		werr  error
		wterm uint64
	}{
		{2, raft.ErrCompacted, 0},
		{3, nil, 3}, // the truncation point keeps its term
		{4, nil, 4},
		{5, nil, 5},
		{6, raft.ErrUnavailable, 0},
	} {
		for _, cacheBytes := range []int{0, -1} { // default cache, and none (Pebble)
			tl := logWith(t, Options{EntryCacheBytes: cacheBytes}, ents)
			term, err := tl.Term(tt.i)
			requireSentinel(t, tt.werr, err, "Term(%d), cache %d", tt.i, cacheBytes)
			require.Equal(t, tt.wterm, term, "Term(%d), cache %d", tt.i, cacheBytes)
		}
	}
}

func TestRaftLogTermNewLog(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, nil, Options{})
	term, err := tl.Term(0)
	require.NoError(t, err)
	require.Zero(t, term)
	_, err = tl.Term(1)
	requireSentinel(t, raft.ErrUnavailable, err)
	first, _ := tl.FirstIndex()
	last, _ := tl.LastIndex()
	require.Equal(t, uint64(1), first)
	require.Equal(t, uint64(0), last)
	require.Zero(t, tl.lastIndexNoErr())
}

func TestRaftLogEntries(t *testing.T) {
	t.Parallel()
	ents := withData(index(3).terms(3, 4, 5, 6), 10)
	s1, s2, s3 := sizeOf(ents[1]), sizeOf(ents[2]), sizeOf(ents[3])
	tests := []struct {
		lo, hi, maxSize uint64
		werr            error
		want            []*pb.Entry
	}{
		{2, 6, math.MaxUint64, raft.ErrCompacted, nil},
		{3, 4, math.MaxUint64, raft.ErrCompacted, nil},
		{4, 5, math.MaxUint64, nil, ents[1:2]},
		{4, 6, math.MaxUint64, nil, ents[1:3]},
		{4, 7, math.MaxUint64, nil, ents[1:4]},
		// Even if maxSize is zero, the first entry is returned.
		{4, 7, 0, nil, ents[1:2]},
		{5, 7, 1, nil, ents[2:3]},
		{4, 7, s1 + s2, nil, ents[1:3]},
		{4, 7, s1 + s2 + s3/2, nil, ents[1:3]},
		{4, 7, s1 + s2 + s3 - 1, nil, ents[1:3]},
		{4, 7, s1 + s2 + s3, nil, ents[1:4]},
		{5, 7, s2 + s3, nil, ents[2:4]},
		{4, 4, math.MaxUint64, nil, nil}, // empty range
	}
	// Cache sizes: everything cached; only the last entry cached (reads
	// span Pebble and the cache); nothing cached.
	for _, cacheBytes := range []int{0, int(s3), -1} {
		for _, tt := range tests {
			tl := logWith(t, Options{EntryCacheBytes: cacheBytes}, ents)
			got, err := tl.Entries(tt.lo, tt.hi, tt.maxSize)
			requireSentinel(t, tt.werr, err, "Entries(%d, %d, %d), cache %d", tt.lo, tt.hi, tt.maxSize, cacheBytes)
			requireEqualEntries(t, tt.want, got)

			// MemoryStorage agrees.
			ms := memWith(t, ents)
			mgot, merr := ms.Entries(tt.lo, tt.hi, tt.maxSize)
			requireSentinel(t, merr, err)
			requireEqualEntries(t, mgot, got)
		}
	}
}

func TestRaftLogEntriesOutOfBounds(t *testing.T) {
	t.Parallel()
	tl := logWith(t, Options{}, index(3).terms(3, 4, 5))

	// MemoryStorage panics on hi beyond last+1; we return an error.
	_, err := tl.Entries(4, 7, math.MaxUint64)
	require.ErrorIs(t, err, raft.ErrUnavailable)
	_, err = tl.Entries(5, 4, math.MaxUint64)
	require.Error(t, err)

	// A log with no entries (only the truncation point) has nothing.
	tl = logWith(t, Options{}, index(3).terms(3))
	_, err = tl.Entries(4, 4, math.MaxUint64)
	requireSentinel(t, raft.ErrUnavailable, err)
	_, err = tl.Entries(3, 4, math.MaxUint64)
	requireSentinel(t, raft.ErrCompacted, err)
	_, err = raft.NewMemoryStorage().Entries(1, 1, math.MaxUint64)
	requireSentinel(t, raft.ErrUnavailable, err, "MemoryStorage")
	tl = openTestLog(t, nil, Options{})
	_, err = tl.Entries(1, 1, math.MaxUint64)
	requireSentinel(t, raft.ErrUnavailable, err)
}

// The caller owns the returned slice and may append to it (raft does).
func TestRaftLogEntriesFreshSlice(t *testing.T) {
	t.Parallel()
	for _, cacheBytes := range []int{0, -1} {
		tl := logWith(t, Options{EntryCacheBytes: cacheBytes}, index(0).terms(0, 1, 1, 1, 2))
		got, err := tl.Entries(1, 3, math.MaxUint64)
		require.NoError(t, err)
		_ = append(got, &pb.Entry{Index: new(uint64(99)), Term: new(uint64(99))})
		got[0] = nil
		again, err := tl.Entries(1, 5, math.MaxUint64)
		require.NoError(t, err)
		requireEqualEntries(t, index(1).terms(1, 1, 1, 2), again)
	}
}

func TestRaftLogLastIndex(t *testing.T) {
	t.Parallel()
	tl := logWith(t, Options{}, index(3).terms(3, 4, 5))
	last, err := tl.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(5), last)

	require.NoError(t, tl.Append(nil, index(6).terms(5), false))
	last, err = tl.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(6), last)

	// Overwriting with a shorter tail moves it back.
	require.NoError(t, tl.Append(nil, index(5).terms(6), false))
	last, _ = tl.LastIndex()
	require.Equal(t, uint64(5), last)

	// Compacting everything leaves last = the truncation point.
	require.NoError(t, tl.Compact(5))
	last, _ = tl.LastIndex()
	require.Equal(t, uint64(5), last)
	require.Equal(t, uint64(5), tl.lastIndexNoErr())
}

func TestRaftLogFirstIndex(t *testing.T) {
	t.Parallel()
	tl := logWith(t, Options{}, index(3).terms(3, 4, 5))
	first, err := tl.FirstIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(4), first)

	require.NoError(t, tl.Compact(4))
	first, _ = tl.FirstIndex()
	require.Equal(t, uint64(5), first)

	tl.resetLog(10, 7)
	first, _ = tl.FirstIndex()
	require.Equal(t, uint64(11), first)
}

func TestRaftLogCompact(t *testing.T) {
	t.Parallel()
	ents := index(3).terms(3, 4, 5)
	for _, tt := range []struct {
		i             uint64
		werr          error
		windex, wterm uint64
		wlen          int
	}{
		{2, raft.ErrCompacted, 3, 3, 2},
		{3, raft.ErrCompacted, 3, 3, 2},
		{4, nil, 4, 4, 1},
		{5, nil, 5, 5, 0},
	} {
		for _, cacheBytes := range []int{0, -1} {
			tl := logWith(t, Options{EntryCacheBytes: cacheBytes}, ents)
			requireSentinel(t, tt.werr, tl.Compact(tt.i), "Compact(%d)", tt.i)
			checkTruncated := func() {
				t.Helper()
				first, _ := tl.FirstIndex()
				last, _ := tl.LastIndex()
				require.Equal(t, tt.windex+1, first)
				require.Equal(t, uint64(5), last)
				term, err := tl.Term(tt.windex)
				require.NoError(t, err)
				require.Equal(t, tt.wterm, term)
				_, err = tl.Term(tt.windex - 1)
				requireSentinel(t, raft.ErrCompacted, err)
				if tt.wlen > 0 {
					got, err := tl.Entries(tt.windex+1, 6, math.MaxUint64)
					require.NoError(t, err)
					requireEqualEntries(t, ents[3-tt.wlen:], got)
				}
			}
			checkTruncated()
			tl.reopen() // the truncation point and the deletion persist
			checkTruncated()
		}
	}
}

func TestRaftLogCompactBeyondLast(t *testing.T) {
	t.Parallel()
	tl := logWith(t, Options{}, index(3).terms(3, 4, 5))
	err := tl.Compact(6)
	require.ErrorIs(t, err, raft.ErrUnavailable)
	first, _ := tl.FirstIndex()
	require.Equal(t, uint64(4), first)
}

// TestRaftLogAppend follows raft's TestStorageAppend, except for appends
// at or below the truncation point: MemoryStorage drops those entries
// silently, RaftLog refuses them (raft never sends them).
func TestRaftLogAppend(t *testing.T) {
	t.Parallel()
	ents := index(3).terms(3, 4, 5)
	for _, tt := range []struct {
		ents []*pb.Entry
		werr bool
		want []*pb.Entry
	}{
		{index(3).terms(3, 4, 5), true, index(3).terms(3, 4, 5)},
		{index(4).terms(4, 5), false, index(3).terms(3, 4, 5)},
		{index(4).terms(6, 6), false, index(3).terms(3, 6, 6)},
		{index(4).terms(4, 5, 5), false, index(3).terms(3, 4, 5, 5)},
		// Overwrite in the middle: the conflicting tail goes.
		{index(4).terms(5), false, index(3).terms(3, 5)},
		{index(5).terms(5), false, index(3).terms(3, 4, 5)},
		{index(5).terms(6), false, index(3).terms(3, 4, 6)},
		{index(5).terms(6, 6, 6), false, index(3).terms(3, 4, 6, 6, 6)},
		// Direct append.
		{index(6).terms(5), false, index(3).terms(3, 4, 5, 5)},
		// A gap is refused.
		{index(7).terms(5), true, index(3).terms(3, 4, 5)},
		// So is anything at or below the truncation point.
		{index(2).terms(3, 3, 5), true, index(3).terms(3, 4, 5)},
	} {
		for _, cacheBytes := range []int{0, -1} {
			tl := logWith(t, Options{EntryCacheBytes: cacheBytes}, ents)
			err := tl.Append(nil, tt.ents, true)
			if tt.werr {
				require.Error(t, err, "append %s", entString(tt.ents))
			} else {
				require.NoError(t, err, "append %s", entString(tt.ents))
			}
			check := func() {
				t.Helper()
				requireLogIs(t, tl.RaftLog, tt.want)
			}
			check()
			tl.reopen() // no stale entry is left behind in Pebble
			check()
		}
	}
}

// requireLogIs checks the whole log: want[0] is the truncation point.
func requireLogIs(t testing.TB, l *RaftLog, want []*pb.Entry) {
	t.Helper()
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	require.Equal(t, want[0].GetIndex()+1, first, "first index")
	require.Equal(t, want[len(want)-1].GetIndex(), last, "last index")
	term, err := l.Term(want[0].GetIndex())
	require.NoError(t, err)
	require.Equal(t, want[0].GetTerm(), term)
	if len(want) == 1 {
		return
	}
	got, err := l.Entries(first, last+1, math.MaxUint64)
	require.NoError(t, err)
	requireEqualEntries(t, want[1:], got)
	for _, e := range want[1:] {
		term, err := l.Term(e.GetIndex())
		require.NoError(t, err)
		require.Equal(t, e.GetTerm(), term, "Term(%d)", e.GetIndex())
	}
}

func TestRaftLogAppendErrorsWriteNothing(t *testing.T) {
	t.Parallel()
	tl := logWith(t, Options{}, index(3).terms(3, 4, 5))
	hs := &pb.HardState{Term: new(uint64(9)), Vote: new(uint64(2)), Commit: new(uint64(5))}

	err := tl.Append(hs, index(7).terms(5), true)
	require.ErrorIs(t, err, raft.ErrUnavailable, "gap")
	err = tl.Append(hs, index(3).terms(3, 5), true)
	require.ErrorIs(t, err, raft.ErrCompacted, "at the truncation point")
	noncontiguous := append(index(5).terms(5), index(7).terms(5)...)
	require.Error(t, tl.Append(hs, noncontiguous, true), "not contiguous")

	tl.reopen()
	requireLogIs(t, tl.RaftLog, index(3).terms(3, 4, 5))
	got, _, err := tl.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(0), got.GetTerm(), "the hard state was not written")
}

// A leader overwritten by a new one after a partition: the follower's
// long uncommitted tail is replaced by a short one, in Pebble and in the
// cache, and stays replaced after a restart.
func TestRaftLogConflictingTail(t *testing.T) {
	t.Parallel()
	for _, cacheBytes := range []int{0, 200, -1} {
		tl := openTestLog(t, nil, Options{EntryCacheBytes: cacheBytes})
		old := withData(index(1).terms(1, 1, 1, 2, 2, 2, 2, 2, 2, 2), 50)
		require.NoError(t, tl.Append(nil, old, true))
		// Warm up the cache on the tail, then replace it.
		_, err := tl.Entries(1, 11, math.MaxUint64)
		require.NoError(t, err)
		repl := withData(index(4).terms(3, 3), 20)
		require.NoError(t, tl.Append(nil, repl, true))

		want := append(index(0).terms(0), old[:3]...)
		want = append(want, repl...)
		requireLogIs(t, tl.RaftLog, want)
		_, err = tl.Entries(4, 7, math.MaxUint64)
		require.ErrorIs(t, err, raft.ErrUnavailable)
		_, err = tl.Term(6)
		requireSentinel(t, raft.ErrUnavailable, err)

		tl.reopen()
		requireLogIs(t, tl.RaftLog, want)

		// And it grows again from there.
		more := withData(index(6).terms(3, 3, 3), 30)
		require.NoError(t, tl.Append(nil, more, false))
		requireLogIs(t, tl.RaftLog, append(want, more...))
	}
}

// A small cache still answers every query correctly: older entries come
// from Pebble, and a read may straddle the two.
func TestRaftLogCacheEviction(t *testing.T) {
	t.Parallel()
	const n = 200
	ents := withData(index(1).terms(make([]uint64, n)...), 100)
	for i, e := range ents {
		e.Term = new(uint64(i/7 + 1))
	}
	entSize := int(sizeOf(ents[0]))
	rng := rand.New(rand.NewPCG(1, 2))
	for _, cacheBytes := range []int{-1, entSize - 1, entSize, 3*entSize + 1, 20 * entSize, 0} {
		tl := openTestLog(t, nil, Options{EntryCacheBytes: cacheBytes})
		for lo := 0; lo < n; {
			k := min(1+rng.IntN(15), n-lo)
			require.NoError(t, tl.Append(nil, ents[lo:lo+k], false))
			lo += k
			requireCacheInvariants(t, tl.RaftLog)
		}
		// An entry bigger than the whole cache is not cached.
		big := withData(index(n+1).terms(50), 5*entSize)
		require.NoError(t, tl.Append(nil, big, false))
		requireCacheInvariants(t, tl.RaftLog)
		all := append(append([]*pb.Entry{{}}, ents...), big...)
		requireLogIs(t, tl.RaftLog, all)

		for range 300 {
			lo := 1 + uint64(rng.IntN(n+1))
			hi := lo + uint64(rng.IntN(n+3-int(lo)))
			maxSize := uint64(rng.IntN(12 * entSize))
			got, err := tl.Entries(lo, hi, maxSize)
			require.NoError(t, err)
			wantEnts := limitSize(all[lo:hi], maxSize)
			requireEqualEntries(t, wantEnts, got)
		}
		if cacheBytes == 0 {
			require.Len(t, tl.cache.ents, n+1, "the default cache holds everything")
		}
	}
}

// limitSize is raft's rule: the longest prefix within maxSize, but at
// least one entry.
func limitSize(ents []*pb.Entry, maxSize uint64) []*pb.Entry {
	if len(ents) == 0 {
		return nil
	}
	size := sizeOf(ents[0])
	for i := 1; i < len(ents); i++ {
		size += sizeOf(ents[i])
		if size > maxSize {
			return ents[:i]
		}
	}
	return ents
}

func requireCacheInvariants(t testing.TB, l *RaftLog) {
	t.Helper()
	c := &l.cache
	require.LessOrEqual(t, c.bytes, c.limit, "cache over its limit")
	sum := 0
	last := l.last.Load()
	for i, ce := range c.ents {
		sum += ce.size
		require.Equal(t, proto.Size(ce.e), ce.size)
		require.Equal(t, last+1-uint64(len(c.ents))+uint64(i), ce.e.GetIndex(), "cache is not a suffix of the log")
	}
	require.Equal(t, sum, c.bytes)
}

func TestRaftLogHardState(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, nil, Options{})
	hs, cs, err := tl.InitialState()
	require.NoError(t, err)
	require.NotNil(t, hs)
	require.True(t, raft.IsEmptyHardState(hs))
	require.NotNil(t, cs, "a nil conf state from the state machine becomes an empty one")

	tl.src.cs = &pb.ConfState{Voters: []uint64{1, 2, 3}}
	want := &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(0))}
	require.NoError(t, tl.Append(want, nil, true))
	// An empty hard state means "unchanged".
	require.NoError(t, tl.Append(&pb.HardState{}, index(1).terms(2), true))
	hs, cs, err = tl.InitialState()
	require.NoError(t, err)
	require.True(t, proto.Equal(want, hs), "got %v", hs)
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())

	// The returned hard state is raft's: changing it changes nothing here.
	hs.Term = new(uint64(100))
	tl.reopen()
	hs, _, err = tl.InitialState()
	require.NoError(t, err)
	require.True(t, proto.Equal(want, hs), "got %v", hs)

	want2 := &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(1))}
	require.NoError(t, tl.Append(want2, nil, false))
	tl.reopen()
	hs, _, _ = tl.InitialState()
	require.True(t, proto.Equal(want2, hs), "got %v", hs)
}

func TestRaftLogResetTo(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, nil, Options{})
	require.NoError(t, tl.Append(
		&pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(4))},
		withData(index(1).terms(1, 1, 2, 3, 3, 3), 10), true))

	tl.resetLog(20, 5) // a snapshot beyond our log
	check := func() {
		t.Helper()
		requireLogIs(t, tl.RaftLog, index(20).terms(5))
		_, err := tl.Term(19)
		requireSentinel(t, raft.ErrCompacted, err)
		_, err = tl.Entries(21, 21, math.MaxUint64)
		requireSentinel(t, raft.ErrUnavailable, err)
		hs, _, err := tl.InitialState()
		require.NoError(t, err)
		// The commit rises to the snapshot; term and vote are kept.
		require.Equal(t, uint64(3), hs.GetTerm())
		require.Equal(t, uint64(2), hs.GetVote())
		require.Equal(t, uint64(20), hs.GetCommit())
	}
	check()
	tl.reopen()
	check()

	// The log continues after the snapshot.
	require.NoError(t, tl.Append(nil, index(21).terms(5, 6), true))
	requireLogIs(t, tl.RaftLog, index(20).terms(5, 5, 6))

	// A snapshot inside the log (a lagging follower) drops it all, too.
	require.NoError(t, tl.Append(
		&pb.HardState{Term: new(uint64(7)), Vote: new(uint64(1)), Commit: new(uint64(30))},
		index(23).terms(6, 6, 6, 7, 7, 7, 7, 7), true))
	tl.resetLog(25, 6)
	requireLogIs(t, tl.RaftLog, index(25).terms(6))
	tl.reopen()
	requireLogIs(t, tl.RaftLog, index(25).terms(6))
	hs, _, _ := tl.InitialState()
	require.Equal(t, uint64(30), hs.GetCommit(), "a higher commit is kept")
	require.Equal(t, uint64(7), hs.GetTerm())
}

func TestRaftLogResetNewLog(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, nil, Options{})
	tl.resetLog(8, 2)
	tl.reopen()
	requireLogIs(t, tl.RaftLog, index(8).terms(2))
	hs, _, _ := tl.InitialState()
	require.Equal(t, uint64(8), hs.GetCommit())
	require.Equal(t, uint64(0), hs.GetTerm())
}

func TestRaftLogSnapshotFromSource(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, nil, Options{})
	tl.src.snap = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(4))}}
	snap, err := tl.Snapshot()
	require.NoError(t, err)
	require.Same(t, tl.src.snap, snap)
}

// Everything comes back after a clean close and reopen.
func TestRaftLogReopen(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, nil, Options{EntryCacheBytes: 500})
	ents := withData(index(1).terms(1, 1, 2, 2, 2, 3, 3, 3, 3, 4), 64)
	hs := &pb.HardState{Term: new(uint64(4)), Vote: new(uint64(3)), Commit: new(uint64(8))}
	require.NoError(t, tl.Append(hs, ents, false))
	require.NoError(t, tl.Compact(3))

	tl.reopen()
	requireLogIs(t, tl.RaftLog, ents[2:])
	got, _, err := tl.InitialState()
	require.NoError(t, err)
	require.True(t, proto.Equal(hs, got))
	require.Empty(t, tl.cache.ents, "the cache starts cold")
}

// A member that acknowledged entries (sync=true) still has them after a
// power cut: only what Pebble synced survives a CrashClone.
func TestRaftLogDurability(t *testing.T) {
	t.Parallel()
	fs := vfs.NewCrashableMem()
	tl := openTestLog(t, fs, Options{})
	synced := withData(index(1).terms(1, 1, 1, 2, 2), 100)
	hs := &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(3))}
	require.NoError(t, tl.Append(hs, synced[:2], true))
	require.NoError(t, tl.Append(nil, synced[2:], true))
	want := append([]*pb.Entry{{}}, synced...)

	// Crash while the database is still open: nothing was closed cleanly.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	after := openTestLog(t, crashed, Options{})
	requireLogIs(t, after.RaftLog, want)
	got, _, _ := after.InitialState()
	require.True(t, proto.Equal(hs, got), "got %v", got)
	after.close()

	// Unsynced appends after the synced ones may or may not survive, but
	// the log is always a valid extension of what was synced.
	more := withData(index(6).terms(2, 2, 2, 2, 2, 2, 2, 2), 100)
	for i := range more {
		require.NoError(t, tl.Append(nil, more[i:i+1], false))
	}
	for seed := range uint64(8) {
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 0))})
		after := openTestLog(t, crashed, Options{})
		last, _ := after.LastIndex()
		require.GreaterOrEqual(t, last, uint64(5), "seed %d", seed)
		require.LessOrEqual(t, last, uint64(13), "seed %d", seed)
		requireLogIs(t, after.RaftLog, append(want, more[:last-5]...))
		after.close()
	}

	// And the brief's variant: close, then crash.
	tl.close()
	crashed = fs.CrashClone(vfs.CrashCloneCfg{})
	after = openTestLog(t, crashed, Options{})
	last, _ := after.LastIndex()
	require.GreaterOrEqual(t, last, uint64(5))
	requireLogIs(t, after.RaftLog, append(want, more[:last-5]...))
}

// Status readers may ask for the bounds while the raft goroutine writes.
func TestRaftLogConcurrentReaders(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, nil, Options{EntryCacheBytes: 2000})
	termOf := func(i uint64) uint64 { return i/10 + 1 }
	const n = 2000
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 0))
			for {
				select {
				case <-done:
					return
				default:
				}
				first, _ := tl.FirstIndex()
				last, _ := tl.LastIndex()
				if last < first {
					continue
				}
				i := first + uint64(rng.IntN(int(last-first+1)))
				term, err := tl.Term(i)
				if err == nil {
					if term != termOf(i) {
						t.Errorf("Term(%d) = %d, want %d", i, term, termOf(i))
						return
					}
				} else if err != raft.ErrCompacted { //nolint:errorlint
					t.Errorf("Term(%d): %v", i, err)
					return
				}
				ents, err := tl.Entries(i, last+1, uint64(rng.IntN(4000)))
				if err == raft.ErrCompacted { //nolint:errorlint
					continue
				}
				if err != nil {
					t.Errorf("Entries(%d, %d): %v", i, last+1, err)
					return
				}
				for k, e := range ents {
					if e.GetIndex() != i+uint64(k) || e.GetTerm() != termOf(e.GetIndex()) {
						t.Errorf("Entries(%d, %d)[%d] = %d/%d", i, last+1, k, e.GetIndex(), e.GetTerm())
						return
					}
				}
			}
		})
	}
	for i := uint64(1); i <= n; i += 10 {
		batch := make([]*pb.Entry, 10)
		for k := range batch {
			batch[k] = &pb.Entry{Index: new(i + uint64(k)), Term: new(termOf(i + uint64(k))), Data: make([]byte, 50)}
		}
		require.NoError(t, tl.Append(nil, batch, i%100 == 1))
		if i%200 == 191 {
			require.NoError(t, tl.Compact(i-100))
		}
	}
	close(done)
	wg.Wait()
}

var raftLogSeed = flag.Uint64("raftlog.seed", 0, "seed for TestRaftLogDifferential (0 = from the clock)")

// TestRaftLogDifferential runs random appends (with overwrites),
// compactions, snapshot resets and restarts against RaftLog and
// raft.MemoryStorage side by side, and compares every answer.
func TestRaftLogDifferential(t *testing.T) {
	t.Parallel()
	seed := *raftLogSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reproduce with: go test -run TestRaftLogDifferential ./storage/ -raftlog.seed=%d", seed)
		}
	})
	runs := 6
	if testing.Short() {
		runs = 3
	}
	for run := range uint64(runs) {
		differentialRun(t, seed+run, 200)
		if t.Failed() {
			t.Logf("failing run seed %d", seed+run)
			return
		}
	}
}

func differentialRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cacheBytes := []int{-1, 150, 1000, 0}[rng.IntN(4)]
	tl := openTestLog(t, nil, Options{EntryCacheBytes: cacheBytes})
	defer tl.close()
	ms := raft.NewMemoryStorage()
	var hs *pb.HardState // what InitialState should return
	term := uint64(1)

	for step := range steps {
		first, _ := ms.FirstIndex()
		last, _ := ms.LastIndex()
		var what string
		switch op := rng.IntN(100); {
		case op < 60: // append, possibly overwriting a tail
			start := first + uint64(rng.IntN(int(last+2-first)))
			if rng.IntN(3) == 0 {
				term++
			}
			ents := make([]*pb.Entry, 1+rng.IntN(8))
			for k := range ents {
				ents[k] = &pb.Entry{Index: new(start + uint64(k)), Term: new(term), Data: make([]byte, rng.IntN(120))}
				for d := range ents[k].Data {
					ents[k].Data[d] = byte(rng.Uint32())
				}
			}
			var newHS *pb.HardState
			if rng.IntN(2) == 0 {
				newHS = &pb.HardState{Term: new(term), Vote: new(uint64(rng.IntN(3))), Commit: new(uint64(rng.IntN(int(last + 1))))}
				hs = newHS
			}
			what = "append " + entString(ents)
			require.NoError(t, ms.Append(ents), what)
			require.NoError(t, tl.Append(newHS, ents, rng.IntN(2) == 0), what)
		case op < 80: // compact, sometimes at the truncation point
			i := first - 1 + uint64(rng.IntN(int(last-first+2)))
			what = "compact " + itoa(i)
			requireSentinel(t, ms.Compact(i), tl.Compact(i), what)
		case op < 88: // install a snapshot inside or beyond the log
			i := first + uint64(rng.IntN(int(last-first+10)))
			snapTerm := term
			if i <= last {
				snapTerm, _ = ms.Term(i)
			}
			what = "reset " + itoa(i)
			require.NoError(t, ms.ApplySnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{
				Index: new(i), Term: new(snapTerm), ConfState: &pb.ConfState{},
			}}), what)
			tl.resetLog(i, snapTerm)
			if hs.GetCommit() < i {
				hs = &pb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(i)}
			}
		case op < 93:
			what = "reopen"
			tl.reopen()
		default:
			what = "nothing"
		}
		compareLogs(t, rng, ms, tl.RaftLog, hs, "step %d: %s", step, what)
		requireCacheInvariants(t, tl.RaftLog)
		if t.Failed() {
			return
		}
	}
}

func compareLogs(t *testing.T, rng *rand.Rand, ms *raft.MemoryStorage, l *RaftLog, hs *pb.HardState, format string, args ...any) {
	t.Helper()
	msg := append([]any{format}, args...)
	first, _ := ms.FirstIndex()
	last, _ := ms.LastIndex()
	gotFirst, _ := l.FirstIndex()
	gotLast, _ := l.LastIndex()
	require.Equal(t, first, gotFirst, msg...)
	require.Equal(t, last, gotLast, msg...)

	gotHS, _, err := l.InitialState()
	require.NoError(t, err, msg...)
	require.True(t, raft.IsEmptyHardState(hs) && raft.IsEmptyHardState(gotHS) ||
		hs.GetTerm() == gotHS.GetTerm() && hs.GetVote() == gotHS.GetVote() && hs.GetCommit() == gotHS.GetCommit(),
		"hard state: want %v, got %v", hs, gotHS)

	// The bounds and their neighbours, then a sample of the middle.
	terms := []uint64{first - min(first, 2), first - 1, first, last, last + 1, last + 2}
	for range 10 {
		terms = append(terms, first+uint64(rng.IntN(int(last+1-first)+1)))
	}
	for _, i := range terms {
		want, werr := ms.Term(i)
		got, err := l.Term(i)
		requireSentinel(t, werr, err, msg...)
		require.Equal(t, want, got, msg...)
	}
	for range 10 {
		lo := first - 1 + uint64(rng.IntN(int(last-first+3)))
		hi := lo + uint64(rng.IntN(int(last+2-lo)))
		maxSize := []uint64{0, 100, 300, math.MaxUint64, uint64(rng.IntN(2000))}[rng.IntN(5)]
		want, werr := ms.Entries(lo, hi, maxSize)
		got, err := l.Entries(lo, hi, maxSize)
		requireSentinel(t, werr, err, msg...)
		requireEqualEntries(t, want, got)
	}
}

func itoa(i uint64) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	p := len(b)
	for ; i > 0; i /= 10 {
		p--
		b[p] = byte('0' + i%10)
	}
	return string(b[p:])
}

// BenchmarkAppend measures one Append (one synced batch) per Ready, with
// 1 and 64 entries of 128 bytes, the cache evicting as it goes.
func BenchmarkAppend(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run("entries="+itoa(uint64(n)), func(b *testing.B) {
			tl := openTestLog(b, nil, Options{EntryCacheBytes: 1 << 20})
			ents := make([]*pb.Entry, n)
			for k := range ents {
				ents[k] = &pb.Entry{Index: new(uint64(0)), Term: new(uint64(1)), Data: make([]byte, 128)}
			}
			hs := &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(0))}
			next := uint64(1)
			b.SetBytes(int64(n * 128))
			b.ReportAllocs()
			for b.Loop() {
				// Fresh entries each time, as raft hands over; building
				// them is not what is measured, but it is cheap.
				b.StopTimer()
				batch := make([]*pb.Entry, n)
				for k := range batch {
					batch[k] = &pb.Entry{Index: new(next + uint64(k)), Term: ents[k].Term, Data: ents[k].Data}
				}
				b.StartTimer()
				if err := tl.Append(hs, batch, true); err != nil {
					b.Fatal(err)
				}
				next += uint64(n)
			}
		})
	}
}
