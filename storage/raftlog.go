package storage

import (
	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// RaftLog is the Raft half of the store: it implements raft.Storage over
// Pebble, with an in-memory cache of recent entries so that a leader
// replicating to followers does not read Pebble.
//
// Raft calls its read methods from the Raft goroutine; Append, Compact
// and the snapshot reset are called from that goroutine too. It is still
// safe for concurrent use (a mutex guards the in-memory state).
type RaftLog struct {
	// STUB: the storage-log helper fills this in.
	db *pebble.DB
	sm stateSource
}

// stateSource is what the log needs from the state machine: the conf
// state as of the applied index, and a live snapshot. *StateMachine
// implements it; tests use a fake.
type stateSource interface {
	ConfState() *pb.ConfState
	snapshot() (*pb.Snapshot, error)
}

var _ raft.Storage = (*RaftLog)(nil)

// newRaftLog loads the log's bounds and hard state from db. sm supplies
// the conf state as of the applied index (InitialState) and the live
// snapshot (Snapshot).
func newRaftLog(db *pebble.DB, opts *Options, sm stateSource) (*RaftLog, error) {
	panic("TODO")
}

// InitialState implements raft.Storage.
func (l *RaftLog) InitialState() (*pb.HardState, *pb.ConfState, error) { panic("TODO") }

// Entries implements raft.Storage.
func (l *RaftLog) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) { panic("TODO") }

// Term implements raft.Storage.
func (l *RaftLog) Term(i uint64) (uint64, error) { panic("TODO") }

// LastIndex implements raft.Storage.
func (l *RaftLog) LastIndex() (uint64, error) { panic("TODO") }

// FirstIndex implements raft.Storage.
func (l *RaftLog) FirstIndex() (uint64, error) { panic("TODO") }

// Snapshot implements raft.Storage: it returns a snapshot of the state
// machine as of its applied index now (see StateMachine.snapshot).
func (l *RaftLog) Snapshot() (*pb.Snapshot, error) { return l.sm.snapshot() }

// Append persists hs (nil or empty = unchanged) and ents in one batch,
// replacing any persisted entries at or after ents[0].Index, and syncs
// the batch when sync is true.
func (l *RaftLog) Append(hs *pb.HardState, ents []*pb.Entry, sync bool) error { panic("TODO") }

// Compact discards the entries up to and including index. The caller
// guarantees index <= the durably applied index.
func (l *RaftLog) Compact(index uint64) error { panic("TODO") }

func (l *RaftLog) lastIndexNoErr() uint64 { panic("TODO") }

// resetTo adds to b the writes that empty the log and make it start after
// meta (used when installing a snapshot).
func (l *RaftLog) resetTo(b *pebble.Batch, meta *pb.SnapshotMetadata) { panic("TODO") }

// afterReset updates the in-memory state once resetTo's batch committed.
func (l *RaftLog) afterReset(meta *pb.SnapshotMetadata) { panic("TODO") }
