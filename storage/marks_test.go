package storage

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// newestWAL returns the path of the newest Raft log segment in the
// store directory dir, and the end of the data written to it (segments
// are preallocated with zeros, and frames end with a non-zero checksum).
func newestWAL(t *testing.T, dir string) (string, int64) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	slices.Sort(segs)
	path := segs[len(segs)-1]
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	end := int64(len(data))
	for end > 0 && data[end-1] == 0 {
		end--
	}
	return path, end
}

// writeSyncedLog opens a store in dir and appends 10 synced batches of
// 20 entries, the last ones in term 2 with a vote, and closes it. It
// returns the last index.
func writeSyncedLog(t *testing.T, dir string) uint64 {
	t.Helper()
	s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
	require.NoError(t, err)
	for i := range 10 {
		term, vote := uint64(1), uint64(1)
		if i >= 8 {
			term, vote = 2, 3
		}
		require.NoError(t, appendEntries(t, s, 20, 100, term, vote))
	}
	last, _ := s.RaftLog().LastIndex()
	require.NoError(t, s.Close())
	return last
}

// TestDamagedWALTailIsRefused damages the last frames of the newest
// Raft log segment of a store that synced them. The log cuts a bad tail
// off as a torn write, so without the marks file the store would open
// without the entries (and the vote) it had acknowledged. Open must
// refuse it with ErrLostState.
func TestDamagedWALTailIsRefused(t *testing.T) {
	t.Parallel()
	damage := map[string]func(t *testing.T, path string, size int64){
		"truncated": func(t *testing.T, path string, size int64) {
			require.NoError(t, os.Truncate(path, size-3000))
		},
		"flipped": func(t *testing.T, path string, size int64) {
			for off := size - 3000; off < size-2000; off += 97 {
				flipByte(t, path, off)
			}
		},
	}
	for name, do := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeSyncedLog(t, dir)
			path, size := newestWAL(t, dir)
			require.Greater(t, size, int64(4000))
			do(t, path, size)

			s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
			if err == nil {
				last, _ := s.RaftLog().LastIndex()
				s.Close()
				t.Fatalf("opened a store that lost its tail (log ends at %d)", last)
			}
			require.ErrorIs(t, err, ErrLostState)
		})
	}
}

// TestIntactStoreReopens is the control: the same store, undamaged,
// reopens with everything, twice (the second time on the record the
// first reopen's Close wrote).
func TestIntactStoreReopens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	want := writeSyncedLog(t, dir)
	for range 2 {
		s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
		require.NoError(t, err)
		last, _ := s.RaftLog().LastIndex()
		require.Equal(t, want, last)
		hs, _, err := s.RaftLog().InitialState()
		require.NoError(t, err)
		require.Equal(t, uint64(2), hs.GetTerm())
		require.Equal(t, uint64(3), hs.GetVote())
		require.NoError(t, s.Close())
	}
}

// TestAppendRecordsVoteBeforeReturning checks that a new term and vote
// are in the marks file, synced, when Append returns (raft sends the
// vote after that), and the last synced index with them.
func TestAppendRecordsVoteBeforeReturning(t *testing.T) {
	t.Parallel()
	disk := NewMemDisk()
	s, err := Open(Options{Disk: disk})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, appendEntries(t, s, 5, 10, 1, 1))
	hs := &pb.HardState{Term: new(uint64(4)), Vote: new(uint64(2)), Commit: new(uint64(0))}
	require.NoError(t, s.Append(hs, nil, true))

	// Only what was synced survives this crash.
	crashed := disk.Crash(nil)
	_, rec, found, err := readMarks(crashed.fs, crashed.fs.PathJoin("/coord", marksFile))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, markRecord{term: 4, vote: 2, durable: 5}, rec)
}

// TestMarksCheck covers each way the recovered state can fall short.
func TestMarksCheck(t *testing.T) {
	t.Parallel()
	r := markRecord{term: 5, vote: 2, durable: 100}
	require.NoError(t, r.check(5, 2, 100))
	require.NoError(t, r.check(6, 0, 120), "a later term, a longer log")
	require.NoError(t, markRecord{term: 5, durable: 10}.check(5, 3, 10), "a vote the record has not seen yet")
	for name, c := range map[string][3]uint64{
		"older term":   {4, 2, 100},
		"lost vote":    {5, 0, 100},
		"other vote":   {5, 3, 100},
		"shorter log":  {5, 2, 99},
		"empty store":  {0, 0, 0},
		"only the log": {5, 2, 1},
	} {
		require.ErrorIs(t, r.check(c[0], c[1], c[2]), ErrLostState, name)
	}
}

// TestMissingMarksFileIsRefused: a directory that had a marks file and
// lost it cannot be checked, so it is refused.
func TestMissingMarksFileIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSyncedLog(t, dir)
	require.NoError(t, os.Remove(filepath.Join(dir, marksFile)))
	_, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
	require.ErrorIs(t, err, ErrLostState)
}

// TestTornMarksSlot: a write torn by a power cut spoils one slot; the
// other still holds a record, and the store opens. Both spoilt: refused.
func TestTornMarksSlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSyncedLog(t, dir)
	path := filepath.Join(dir, marksFile)
	flipByte(t, path, 5)
	s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	// Close rewrote a slot: spoil both now.
	flipByte(t, path, 5)
	flipByte(t, path, marksSlotSize+5)
	_, err = Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
	require.ErrorIs(t, err, ErrLostState)
}

// TestCrashesNeverLookLikeLostState crashes a store at random points of
// a random history (synced and unsynced appends, new terms and votes,
// conflicting tails replaced) and checks that every restart opens, with
// at least what was synced: the marks file never runs ahead of the log.
func TestCrashesNeverLookLikeLostState(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	disk := NewMemDisk()
	var syncedLast, syncedTerm, syncedVote uint64
	for round := range 100 {
		s, err := Open(Options{Disk: disk})
		require.NoError(t, err, "round %d", round)
		last, _ := s.RaftLog().LastIndex()
		hs, _, _ := s.RaftLog().InitialState()
		require.GreaterOrEqual(t, last, syncedLast, "round %d: synced entries lost", round)
		require.GreaterOrEqual(t, hs.GetTerm(), syncedTerm, "round %d", round)
		if hs.GetTerm() == syncedTerm && syncedVote != 0 {
			require.Equal(t, syncedVote, hs.GetVote(), "round %d", round)
		}
		term, vote := hs.GetTerm(), hs.GetVote()
		syncedLast, syncedTerm, syncedVote = last, term, vote
		for range rng.IntN(8) {
			first := last + 1
			if last > 0 && rng.IntN(4) == 0 {
				// A new leader replaces a tail: fewer entries than before
				// (this member may have heard of its term already).
				first = 1 + rng.Uint64N(last)
				if rng.IntN(2) == 0 {
					term++
					vote = 0
				}
			}
			if rng.IntN(5) == 0 {
				term++
				vote = 1 + rng.Uint64N(3)
			}
			n := 1 + rng.IntN(5)
			ents := make([]*pb.Entry, n)
			for i := range ents {
				ents[i] = &pb.Entry{Index: new(first + uint64(i)), Term: new(term), Data: make([]byte, 1+rng.IntN(300))}
			}
			sync := rng.IntN(4) != 0
			h := &pb.HardState{Term: new(term), Vote: new(vote), Commit: new(uint64(0))}
			require.NoError(t, s.Append(h, ents, sync))
			last = first + uint64(n) - 1
			if sync {
				syncedLast, syncedTerm, syncedVote = last, term, vote
			} else if last < syncedLast {
				// The cut is not synced: a crash may undo it or not.
				syncedLast = min(syncedLast, first-1)
			}
		}
		if rng.IntN(4) == 0 {
			require.NoError(t, s.Close())
			syncedLast = last
			syncedTerm, syncedVote = term, vote
			continue
		}
		crashed := disk.Crash(rng)
		require.NoError(t, s.Close())
		disk = crashed
	}
}

// BenchmarkStoreAppend compares one synced Append per Ready through the
// Store (which keeps the marks file) with RaftLog.Append alone, on a
// real disk: the marks file costs one small write per synced Append,
// no sync.
func BenchmarkStoreAppend(b *testing.B) {
	for _, via := range []string{"raftlog", "store"} {
		b.Run(via, func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir()})
			require.NoError(b, err)
			defer s.Close()
			hs := &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(0))}
			data := make([]byte, 128)
			next := uint64(1)
			for b.Loop() {
				ents := []*pb.Entry{{Index: new(next), Term: new(uint64(1)), Data: data}}
				if via == "store" {
					err = s.Append(hs, ents, true)
				} else {
					err = s.RaftLog().Append(hs, ents, true)
				}
				if err != nil {
					b.Fatal(err)
				}
				next++
			}
		})
	}
}
