package storage

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage/wal"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// v1Testdata is a format-1 store written by that version's code (see
// its README).
const v1Testdata = "testdata/v1store"

// v1Disk returns a crashable in-memory disk holding a synced copy of the
// format-1 store, where Open with Dir "" finds it.
func v1Disk(t *testing.T) *MemDisk {
	t.Helper()
	disk := NewMemDisk()
	require.NoError(t, disk.fs.MkdirAll("/coord", 0o755))
	names, err := os.ReadDir(v1Testdata)
	require.NoError(t, err)
	for _, n := range names {
		if n.Name() == "README" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(v1Testdata, n.Name()))
		require.NoError(t, err)
		f, err := disk.fs.Create("/coord/"+n.Name(), vfs.WriteCategoryUnspecified)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
	}
	require.NoError(t, syncDir(disk.fs, "/coord"))
	return disk
}

// requireUpgraded checks that s holds the format-1 store's Raft state
// (README), now in the WAL, and nothing of its log in Pebble.
func requireUpgraded(t *testing.T, s *Store) {
	t.Helper()
	l := s.RaftLog()
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	require.Equal(t, uint64(11), first)
	require.Equal(t, uint64(40), last)
	term, err := l.Term(10)
	require.NoError(t, err)
	require.Equal(t, uint64(2), term)
	ents, err := l.Entries(11, 41, 1<<30)
	require.NoError(t, err)
	require.Len(t, ents, 30)
	for i, e := range ents {
		idx := uint64(11 + i)
		require.Equal(t, idx, e.GetIndex())
		require.Equal(t, uint64(2), e.GetTerm())
		if idx > 15 {
			require.Equal(t, []byte{byte(idx), 'v', '1'}, e.GetData())
		} else {
			require.Empty(t, e.GetData())
		}
	}
	hs, cs, err := l.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(2), hs.GetTerm())
	require.Equal(t, uint64(1), hs.GetVote())
	require.Equal(t, uint64(20), hs.GetCommit())
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())
	require.Equal(t, uint64(15), s.StateMachine().AppliedIndex())

	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLogEntry}, UpperBound: []byte{prefixLogMeta + 1}})
	require.NoError(t, err)
	defer it.Close()
	require.False(t, it.First(), "format-1 log keys left in Pebble")
	val, closer, err := s.db.Get([]byte{prefixFormat})
	require.NoError(t, err)
	defer closer.Close()
	require.Equal(t, FormatVersion, readUint64(val))
}

// TestUpgradeFromFormat1 opens a store written by format 1's code: its
// log, hard state and truncation point move to the WAL, and the store
// reopens as format 2 with the same state.
func TestUpgradeFromFormat1(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(v1Testdata)))
	for range 2 {
		s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
		require.NoError(t, err)
		requireUpgraded(t, s)
		require.NoError(t, s.Close())
	}
}

// walFailer fails the nth write to the Raft log's directory (and every
// write after it, as a dead disk would).
type walFailer struct {
	n, seen atomic.Int64
}

var errInjected = errors.New("injected write error")

func (w *walFailer) MaybeError(op errorfs.Op) error {
	if op.Kind.ReadOrWrite() != errorfs.OpIsWrite || op.Kind == errorfs.OpFileClose ||
		!strings.Contains(op.Path, "/"+walDir) {
		return nil
	}
	if w.seen.Add(1) >= w.n.Load() {
		return errInjected
	}
	return nil
}

func (w *walFailer) String() string { return "walFailer" }

// TestUpgradeInterrupted stops the upgrade at each write to the new log
// in turn, crashes the disk (keeping a random part of what was not
// synced), and opens again: the next Open must complete the upgrade with
// the whole state. It also covers a crash after the log was complete,
// before Pebble dropped the old one.
func TestUpgradeInterrupted(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for n := int64(1); ; n++ {
		disk := v1Disk(t)
		fail := &walFailer{}
		fail.n.Store(n)
		s, err := Open(Options{Disk: disk, wrapFS: func(fs vfs.FS) vfs.FS { return errorfs.Wrap(fs, fail) }})
		if err == nil {
			// n is past the upgrade's last write to the log.
			require.NoError(t, s.Close())
			require.Greater(t, n, int64(3))
			t.Logf("the upgrade made %d writes to the log", n-1)
			break
		}
		require.ErrorIs(t, err, errInjected, "write %d", n)
		s, err = Open(Options{Disk: disk.Crash(rng)})
		require.NoError(t, err, "after a crash at write %d", n)
		requireUpgraded(t, s)
		require.NoError(t, s.Close())
	}

	// The log copied and synced, the Pebble batch not committed.
	disk := v1Disk(t)
	db, err := pebble.Open("/coord", &pebble.Options{FS: disk.fs, Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	require.NoError(t, err)
	w, err := wal.Open(wal.Options{FS: disk.fs, Dir: "/coord/" + walDir})
	require.NoError(t, err)
	require.NoError(t, copyV1Log(db, w))
	require.NoError(t, w.Close())
	crashed := disk.Crash(nil)
	require.NoError(t, db.Close())
	s, err := Open(Options{Disk: crashed})
	require.NoError(t, err)
	requireUpgraded(t, s)
	require.NoError(t, s.Close())
}

// TestStateMachineAheadOfLog: an entry applies once a quorum holds it,
// possibly before this member's own append is durable, and the state
// machine's writes may become durable without the log's. After such a
// crash the log must restart after the applied entry, with a commit
// index raft accepts (>= applied).
func TestStateMachineAheadOfLog(t *testing.T) {
	t.Parallel()
	disk := NewMemDisk()
	s, err := Open(Options{Disk: disk})
	require.NoError(t, err)
	require.NoError(t, s.Bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	ents := index(2).terms(2, 2, 2, 2, 2, 2, 2, 2, 2)
	hs := &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(1))}
	require.NoError(t, s.Append(hs, ents[:4], true))   // 2..5 synced
	require.NoError(t, s.Append(nil, ents[4:], false)) // 6..10 not
	_, err = s.StateMachine().Apply(ents[:8], nil)     // through 9
	require.NoError(t, err)
	require.NoError(t, s.sm.syncImage()) // the image as of the applied index
	require.NoError(t, s.db.LogData(nil, pebble.Sync))
	crashed := disk.Crash(nil)
	require.NoError(t, s.Close())

	s, err = Open(Options{Disk: crashed})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, uint64(9), s.StateMachine().AppliedIndex())
	first, _ := s.RaftLog().FirstIndex()
	last, _ := s.RaftLog().LastIndex()
	require.Equal(t, uint64(10), first)
	require.Equal(t, uint64(9), last)
	term, err := s.RaftLog().Term(9)
	require.NoError(t, err)
	require.Equal(t, uint64(2), term)
	got, _, err := s.RaftLog().InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(9), got.GetCommit())
	require.Equal(t, uint64(2), got.GetTerm())
	require.Equal(t, uint64(1), got.GetVote())
}

// TestStateMachineAheadOfCommit: the log holds the applied entries, but
// the hard state that committed them was not synced; Open raises the
// commit index to the applied one and keeps the log.
func TestStateMachineAheadOfCommit(t *testing.T) {
	t.Parallel()
	disk := NewMemDisk()
	s, err := Open(Options{Disk: disk})
	require.NoError(t, err)
	require.NoError(t, s.Bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	ents := index(2).terms(2, 2, 2, 2)
	hs := &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(1))}
	require.NoError(t, s.Append(hs, ents, true))
	_, err = s.StateMachine().Apply(ents[:3], nil) // through 4
	require.NoError(t, err)
	require.NoError(t, s.sm.syncImage()) // the image as of the applied index
	require.NoError(t, s.db.LogData(nil, pebble.Sync))
	crashed := disk.Crash(nil)
	require.NoError(t, s.Close())

	s, err = Open(Options{Disk: crashed})
	require.NoError(t, err)
	defer s.Close()
	first, _ := s.RaftLog().FirstIndex()
	last, _ := s.RaftLog().LastIndex()
	require.Equal(t, uint64(2), first)
	require.Equal(t, uint64(5), last)
	got, _, err := s.RaftLog().InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(4), got.GetCommit())
}

// TestBootstrapInterrupted: Bootstrap syncs the founding state machine,
// then resets the log; a crash between the two leaves a log that Open
// resets to the bootstrap snapshot, with its term and commit.
func TestBootstrapInterrupted(t *testing.T) {
	t.Parallel()
	disk := NewMemDisk()
	fail := &walFailer{}
	fail.n.Store(1 << 40)
	s, err := Open(Options{Disk: disk, wrapFS: func(fs vfs.FS) vfs.FS { return errorfs.Wrap(fs, fail) }})
	require.NoError(t, err)
	fail.n.Store(fail.seen.Load() + 1)
	require.ErrorIs(t, s.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2}}, nil), ErrFault)
	crashed := disk.Crash(nil)
	_ = s.Close()

	s, err = Open(Options{Disk: crashed})
	require.NoError(t, err)
	defer s.Close()
	require.False(t, s.IsNew())
	first, _ := s.RaftLog().FirstIndex()
	last, _ := s.RaftLog().LastIndex()
	require.Equal(t, uint64(2), first)
	require.Equal(t, uint64(1), last)
	hs, cs, err := s.RaftLog().InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(1), hs.GetTerm())
	require.Equal(t, uint64(1), hs.GetCommit())
	require.Equal(t, []uint64{1, 2}, cs.GetVoters())
}

// TestOldSessionCommandsReplayAsBefore: a log written before command
// format 6 (creations that are not charged, credits, seen marks, an
// expiry) applies exactly as the build that wrote it applied it: the
// same session records byte for byte (formats 1 and 2), no session clock,
// nothing charged to the quota, no owner's bound.
func TestOldSessionCommandsReplayAsBefore(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{QuotaBytes: 64})
	old := []*command.Command{
		{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9}},
		{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9, Owner: "client:x"}},
		{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9, Owner: "client:x"}},
		{Kind: command.KindSessionCredit, Session: &command.Session{Term: 1, Credits: []command.Credit{{ID: 1, Nanos: 7}, {ID: 2, Nanos: 9}}}},
		{Kind: command.KindSessionSeen, Session: &command.Session{Term: 1, IDs: []int64{2}}},
		{Kind: command.KindSessionEnd, Session: &command.Session{ID: 3, Expired: true, Term: 1}},
	}
	ents := ts.entries(old...)
	for i, e := range ents {
		require.LessOrEqual(t, e.GetData()[0], byte(5), "command %d is in a format older builds wrote", i)
	}
	out, err := ts.Apply(ents, nil)
	require.NoError(t, err)
	for i, r := range out.Results {
		require.Equal(t, command.StatusOK, r.Result.Status, "command %d", i)
	}
	record := func(id int64) []byte {
		v, closer, err := ts.image().Get(appendSessionKey(nil, id))
		require.NoError(t, err)
		defer closer.Close()
		return append([]byte(nil), v...)
	}
	ttl := []byte{0x80, 0xe4, 0x97, 0xd0, 0x12} // 5e9 as a uvarint
	require.Equal(t, append(append([]byte{sessionFormat1}, ttl...), 7), record(1))
	require.Equal(t, append(append(append([]byte{sessionFormat2}, ttl...), 0), append([]byte{8}, "client:x"...)...), record(2))
	_, closer, err := ts.image().Get(metaClockKey)
	require.ErrorIs(t, err, pebble.ErrNotFound, "no session clock")
	if closer != nil {
		closer.Close()
	}
	require.Zero(t, ts.SessionBytes(), "nothing charged")
	require.Equal(t, command.StatusOK, ts.txn(command.Txn{Then: []command.Op{putOp("k", strings.Repeat("v", 60))}}).Status,
		"the quota is the keys' alone, as it was")
}
