package storage

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// logCommands appends entries carrying cmds to s's Raft log, synced and
// committed, and returns them.
func logCommands(t *testing.T, s *Store, cmds ...*command.Command) []*pb.Entry {
	t.Helper()
	last, _ := s.RaftLog().LastIndex()
	ents := make([]*pb.Entry, len(cmds))
	for i, c := range cmds {
		data, err := command.Encode(c)
		require.NoError(t, err)
		ents[i] = &pb.Entry{Index: new(last + 1 + uint64(i)), Term: new(uint64(1)), Data: data}
	}
	hs := &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(last + uint64(len(cmds)))}
	require.NoError(t, s.Append(hs, ents, true))
	return ents
}

func somePuts(rng *rand.Rand, n int) []*command.Command {
	cmds := make([]*command.Command, n)
	for i := range cmds {
		k := fmt.Sprintf("k/%d", rng.IntN(20))
		op := putOp(k, fmt.Sprint(rng.Uint32()))
		if rng.IntN(5) == 0 {
			op = delOp(k)
		}
		cmds[i] = txnCmd(command.Txn{Then: []command.Op{op}})
	}
	return cmds
}

// A crash after Apply returned but before the image writer committed its
// batches leaves Pebble at an earlier applied index; replaying the log
// from there yields the state Apply had published.
func TestCrashBeforeImageCommitReplays(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	disk := NewMemDisk()
	hold := make(chan struct{})
	var holding atomic.Bool
	s, err := Open(Options{Disk: disk, HistoryRevisions: 50, beforeImageCommit: func() {
		if holding.Load() {
			<-hold
		}
	}})
	require.NoError(t, err)
	require.NoError(t, s.Bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	sm := s.StateMachine()

	_, err = sm.Apply(logCommands(t, s, somePuts(rng, 30)...), nil)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	synced := sm.AppliedIndex()

	holding.Store(true)
	for range 5 {
		_, err = sm.Apply(logCommands(t, s, somePuts(rng, 1+rng.IntN(20))...), nil)
		require.NoError(t, err)
	}
	wantKVs, wantRev, err := sm.List("")
	require.NoError(t, err)
	wantIndex := sm.AppliedIndex()
	require.Greater(t, wantIndex, synced)

	crashed := disk.Crash(nil)
	close(hold)
	require.NoError(t, s.Close())

	s2, err := Open(Options{Disk: crashed, HistoryRevisions: 50})
	require.NoError(t, err)
	defer s2.Close()
	sm2 := s2.StateMachine()
	require.Equal(t, synced, sm2.AppliedIndex(), "the image should be the synced one")
	last, err := s2.RaftLog().LastIndex()
	require.NoError(t, err)
	require.Equal(t, wantIndex, last)
	ents, err := s2.RaftLog().Entries(sm2.AppliedIndex()+1, last+1, 1<<30)
	require.NoError(t, err)
	_, err = sm2.Apply(ents, nil)
	require.NoError(t, err)
	kvs, rev, err := sm2.List("")
	require.NoError(t, err)
	require.Equal(t, wantRev, rev)
	require.Equal(t, len(wantKVs), len(kvs))
	for i := range kvs {
		requireSameKV(t, wantKVs[i], kvs[i])
	}
	// And the image the replay wrote is the same after a reopen.
	require.NoError(t, s2.Sync())
	hist, err := sm2.History(sm2.OldestRevision()-1, 0)
	require.NoError(t, err)
	require.Equal(t, rev, hist[len(hist)-1].Rev)
}

// A commit of the image that fails faults the store: Apply, Sync and the
// readers of Pebble return the fault, and the process lives. The failure
// is injected as Pebble reports a failed write-ahead log write on a
// commit: through the store's faultLogger.Fatalf, which panics out of
// Commit.
func TestImageCommitFaultFailsTheStore(t *testing.T) {
	t.Parallel()
	rec := newFaultRecorder()
	var (
		failing atomic.Bool
		s       *Store
	)
	s, err := Open(Options{
		Logger:  slog.New(slog.DiscardHandler),
		OnFault: rec.hook,
		beforeImageCommit: func() {
			if failing.Load() {
				faultLogger{f: s.faults}.Fatalf(commitErrorFormat, syscall.ENOSPC)
			}
		},
	})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	sm := s.StateMachine()
	rng := rand.New(rand.NewPCG(1, 1))
	_, err = sm.Apply(logCommands(t, s, somePuts(rng, 10)...), nil)
	require.NoError(t, err)
	require.NoError(t, s.Sync())

	failing.Store(true)
	// Apply returns before the commit; the next one, or a Sync, reports it.
	_, err = sm.Apply(sm.nextEntries(somePuts(rng, 5)), nil)
	require.NoError(t, err)
	err = s.Sync()
	require.ErrorIs(t, err, ErrFault)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, rec.wait(t), ErrFault)
	_, err = sm.Apply(sm.nextEntries(somePuts(rng, 1)), nil)
	require.ErrorIs(t, err, ErrFault)
	_, err = sm.History(0, 0)
	require.ErrorIs(t, err, ErrFault)
	_, err = sm.snapshot()
	require.ErrorIs(t, err, ErrFault)
	require.Equal(t, 1, rec.calls())
}

// nextEntries numbers cmds after the applied index, for tests that do not
// need them in the Raft log.
func (sm *StateMachine) nextEntries(cmds []*command.Command) []*pb.Entry {
	next := sm.AppliedIndex() + 1
	ents := make([]*pb.Entry, len(cmds))
	for i, c := range cmds {
		data, _ := command.Encode(c)
		ents[i] = &pb.Entry{Index: new(next + uint64(i)), Term: new(uint64(1)), Data: data}
	}
	return ents
}
