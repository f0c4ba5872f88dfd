package storage

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	pb "go.etcd.io/raft/v3/raftpb"
)

// StateMachine is the replicated state: keys, sessions, the cell revision
// and the change history. Apply is called from one goroutine; reads are
// safe concurrently with it and see the state as of some applied index.
type StateMachine struct {
	// STUB: the state-machine helper fills this in.
	db *pebble.DB
}

func newStateMachine(db *pebble.DB, opts *Options) (*StateMachine, error) { panic("TODO") }

// EventType says whether a change wrote or deleted a key.
type EventType uint8

const (
	// EventPut is a key created or updated.
	EventPut EventType = iota + 1
	// EventDelete is a key deleted (explicitly, or by session end).
	EventDelete
)

// Event is one key's change. For a delete, KV holds the key, its
// CreateRev/Version before deletion, and ModRev = the deleting revision.
type Event struct {
	Type EventType
	KV   command.KV
}

// Revision is every change of one revision, in the order they applied.
type Revision struct {
	Rev    int64
	Events []Event
}

// Applied is the outcome of one committed entry that carried a command.
type Applied struct {
	Index  uint64
	ID     uint64 // the command's ID (0 = nobody waits)
	Result command.Result
}

// ApplyOutput is what one Apply call produced.
type ApplyOutput struct {
	Results []Applied  // one per command entry, in log order
	Changes []Revision // the revisions these entries created, in order
}

// Apply applies committed entries in order in one Pebble batch (not
// synced: the log sync that follows covers it; the entries are in the
// durable log anyway). cs, when non-nil, is the conf state after these
// entries (raftnode has applied their conf changes). An entry whose
// command carries an unknown format version stops the apply with
// command.ErrVersion; a malformed one yields StatusInvalid.
func (sm *StateMachine) Apply(ents []*pb.Entry, cs *pb.ConfState) (ApplyOutput, error) {
	panic("TODO")
}

// AppliedIndex returns the index of the last applied entry.
func (sm *StateMachine) AppliedIndex() uint64 { panic("TODO") }

// Revision returns the current cell revision.
func (sm *StateMachine) Revision() int64 { panic("TODO") }

// ConfState returns the membership as of the applied index.
func (sm *StateMachine) ConfState() *pb.ConfState { panic("TODO") }

// Get returns the key, or found=false.
func (sm *StateMachine) Get(key string) (kv command.KV, found bool, err error) { panic("TODO") }

// List returns every key with the prefix, in key order, and the revision
// the read saw.
func (sm *StateMachine) List(prefix string) ([]command.KV, int64, error) { panic("TODO") }

// History returns up to limit revisions after fromRev, in order. It
// returns ErrCompacted (wrapped, with the oldest available revision)
// when revisions after fromRev are no longer retained.
func (sm *StateMachine) History(fromRev int64, limit int) ([]Revision, error) { panic("TODO") }

// OldestRevision returns the oldest revision still in the history.
func (sm *StateMachine) OldestRevision() int64 { panic("TODO") }

// SessionInfo describes a live session.
type SessionInfo struct {
	ID  int64
	TTL int64 // nanoseconds
}

// Sessions returns every live session.
func (sm *StateMachine) Sessions() ([]SessionInfo, error) { panic("TODO") }

// snapshot returns a raft snapshot of the state as of the applied index
// now, and keeps a Pebble snapshot of it open for OpenSnapshot.
func (sm *StateMachine) snapshot() (*pb.Snapshot, error) { panic("TODO") }

// SnapshotReader yields a snapshot's state in chunks.
type SnapshotReader interface {
	// Next returns the next chunk, or io.EOF after the last.
	Next() ([]byte, error)
	Close() error
}

// OpenSnapshot returns a reader of the state captured by the snapshot()
// call that returned index; false if none is held for that index.
func (sm *StateMachine) OpenSnapshot(index uint64) (SnapshotReader, bool) { panic("TODO") }

// StageChunk stores chunk seq of the snapshot at index/term being received.
func (sm *StateMachine) StageChunk(index, term uint64, seq int, data []byte, last bool) error {
	panic("TODO")
}

// StagedComplete reports whether every chunk of the snapshot at index/term arrived.
func (sm *StateMachine) StagedComplete(index, term uint64) bool { panic("TODO") }

func (sm *StateMachine) bootstrap(cs *pb.ConfState) error { panic("TODO") }

func (sm *StateMachine) installStaged(b *pebble.Batch, snap *pb.Snapshot) error { panic("TODO") }

func (sm *StateMachine) afterInstall(snap *pb.Snapshot) { panic("TODO") }

func (sm *StateMachine) close() {}
