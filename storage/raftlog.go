package storage

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/coordcell/coord/storage/wal"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// RaftLog is the Raft half of the store: it implements raft.Storage over
// a write-ahead log of its own (package wal: one frame and one fdatasync
// per append, the head dropped a segment at a time), with an in-memory
// cache of recent entries so that a leader replicating to followers does
// not read the segments.
//
// Raft calls its read methods from the Raft goroutine; Append, Compact
// and the snapshot reset are called from that goroutine too. It is still
// safe for concurrent use (a mutex guards the in-memory state).
//
// The log is the entries (truncIndex, last]. The entry at truncIndex is
// gone (compacted, or covered by an installed snapshot) but its term is
// kept, because raft matches appends against it.
type RaftLog struct {
	w      *wal.Log
	sm     stateSource
	faults *faults // nil in tests of the log alone

	// mu serializes every operation, including its WAL reads and writes,
	// so the in-memory state always agrees with what the WAL holds. An
	// Append holds it across its (possibly synced) write.
	mu         sync.Mutex
	hardState  *pb.HardState // as last persisted; nil = never written
	truncIndex uint64
	truncTerm  uint64
	cache      entryCache
	sizeBuf    []int // reused: encoded sizes of the entries being appended

	// first and last are FirstIndex and LastIndex. They change only under
	// mu but are read atomically, so status readers asking for LastIndex
	// never wait behind an fsync in Append.
	first atomic.Uint64
	last  atomic.Uint64
}

// stateSource is what the log needs from the state machine: the conf
// state as of the applied index, and a live snapshot. *StateMachine
// implements it; tests use a fake.
type stateSource interface {
	ConfState() *pb.ConfState
	snapshot() (*pb.Snapshot, error)
}

var _ raft.Storage = (*RaftLog)(nil)

// newRaftLog takes over the recovered log w. sm supplies the conf state
// as of the applied index (InitialState) and the live snapshot
// (Snapshot); f, if not nil, is told of a write that failed.
func newRaftLog(w *wal.Log, opts *Options, sm stateSource, f *faults) *RaftLog {
	limit := opts.EntryCacheBytes
	if limit == 0 {
		limit = defaultEntryCacheBytes // as Options documents (Store sets it; tests may not)
	}
	// A negative limit turns the cache off, so every read goes to the
	// segments (tests use that to exercise that path).
	l := &RaftLog{w: w, sm: sm, faults: f, cache: entryCache{limit: max(limit, 0)}}
	l.hardState = w.HardState()
	l.truncIndex, l.truncTerm = w.Truncated()
	l.first.Store(l.truncIndex + 1)
	l.last.Store(w.LastIndex())
	return l
}

// fail reports a failed write of the log as a fault of the store: the
// log's state on disk is unknown after it, so nothing more may be
// written (a member that went on could acknowledge what is not durable).
func (l *RaftLog) fail(what string, err error) error {
	err = fmt.Errorf("%w: raft log: %s: %w", ErrFault, what, err)
	if l.faults == nil {
		return err
	}
	return l.faults.fail(err)
}

// InitialState implements raft.Storage.
func (l *RaftLog) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.Lock()
	hs := l.hardState
	l.mu.Unlock()
	if hs == nil {
		hs = &pb.HardState{}
	} else {
		// Hand raft its own copy: we keep ours to rewrite it on reset.
		hs = proto.Clone(hs).(*pb.HardState)
	}
	return hs, pb.EnsureConfState(l.sm.ConfState()), nil
}

// Entries implements raft.Storage. Unlike raft.MemoryStorage, which
// panics, it returns an error wrapping raft.ErrUnavailable when hi is
// beyond LastIndex()+1.
func (l *RaftLog) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.last.Load()
	switch {
	case lo <= l.truncIndex:
		return nil, raft.ErrCompacted
	case hi > last+1:
		return nil, fmt.Errorf("storage: entries [%d, %d) beyond last index %d: %w", lo, hi, last, raft.ErrUnavailable)
	case last == l.truncIndex:
		// No entries at all; MemoryStorage answers the same.
		return nil, raft.ErrUnavailable
	case lo > hi:
		return nil, fmt.Errorf("storage: invalid entries range [%d, %d)", lo, hi)
	case lo == hi:
		return nil, nil
	}

	var (
		out  []*pb.Entry
		size uint64
	)
	// The cache holds a suffix of the log; anything before it is read
	// from the segments.
	if cacheFirst := l.cache.firstIndex(last); lo < cacheFirst {
		end := min(hi, cacheFirst)
		var err error
		out, err = l.w.Entries(lo, end, maxSize)
		if err != nil {
			return nil, fmt.Errorf("storage: read log entries [%d, %d): %w", lo, end, err)
		}
		if uint64(len(out)) < end-lo {
			return out, nil // stopped for size
		}
		for _, e := range out {
			size += uint64(proto.Size(e))
		}
		lo = end
	}
	if lo < hi {
		out = l.cache.collect(out, lo, hi, size, maxSize)
	}
	return out, nil
}

// Term implements raft.Storage.
func (l *RaftLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch last := l.last.Load(); {
	case i == l.truncIndex:
		return l.truncTerm, nil
	case i < l.truncIndex:
		return 0, raft.ErrCompacted
	case i > last:
		return 0, raft.ErrUnavailable
	}
	return l.termLocked(i)
}

// termLocked returns the term of entry i, which must be in (truncIndex,
// last].
func (l *RaftLog) termLocked(i uint64) (uint64, error) {
	if e := l.cache.get(i, l.last.Load()); e != nil {
		return e.GetTerm(), nil
	}
	term, err := l.w.Term(i)
	if err != nil {
		return 0, fmt.Errorf("storage: term of log entry %d: %w", i, err)
	}
	return term, nil
}

// LastIndex implements raft.Storage.
func (l *RaftLog) LastIndex() (uint64, error) { return l.last.Load(), nil }

// FirstIndex implements raft.Storage.
func (l *RaftLog) FirstIndex() (uint64, error) { return l.first.Load(), nil }

// Snapshot implements raft.Storage: it returns a snapshot of the state
// machine as of its applied index now (see StateMachine.snapshot).
func (l *RaftLog) Snapshot() (*pb.Snapshot, error) { return l.sm.snapshot() }

// Append persists hs (nil or empty = unchanged) and ents in one frame,
// replacing any persisted entries at or after ents[0].Index, and syncs
// it when sync is true.
//
// ents must be contiguous and start in (truncated index, LastIndex()+1];
// otherwise Append returns an error (wrapping raft.ErrCompacted or
// raft.ErrUnavailable for the two bounds) and writes nothing. Unlike
// raft.MemoryStorage it does not silently drop entries at or below the
// truncation point: raft never sends those, so they indicate a bug.
//
// The entries and hs are kept in memory by pointer, not copied: like
// raft, the caller must not mutate them afterwards.
func (l *RaftLog) Append(hs *pb.HardState, ents []*pb.Entry, sync bool) error {
	writeHS := !raft.IsEmptyHardState(hs)
	if !writeHS && len(ents) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()

	prevLast := l.last.Load()
	var firstNew, newLast uint64
	if len(ents) > 0 {
		firstNew = ents[0].GetIndex()
		newLast = firstNew + uint64(len(ents)) - 1
		if firstNew <= l.truncIndex {
			return fmt.Errorf("storage: append at %d, at or below truncated index %d: %w", firstNew, l.truncIndex, raft.ErrCompacted)
		}
		if firstNew > prevLast+1 {
			return fmt.Errorf("storage: append at %d leaves a gap after last index %d: %w", firstNew, prevLast, raft.ErrUnavailable)
		}
		for i, e := range ents {
			if e.GetIndex() != firstNew+uint64(i) {
				return fmt.Errorf("storage: append: entry %d has index %d, want %d", i, e.GetIndex(), firstNew+uint64(i))
			}
		}
	}
	if !writeHS {
		hs = nil
	}
	// The WAL drops the tail after the new entries itself (raft's rule:
	// writing entry i discards every persisted entry >= i).
	if err := l.w.Append(hs, ents, sync); err != nil {
		return l.fail("append", err)
	}

	if writeHS {
		l.hardState = hs
	}
	if len(ents) > 0 {
		sizes := l.sizeBuf[:0]
		for _, e := range ents {
			sizes = append(sizes, proto.Size(e))
		}
		l.sizeBuf = sizes
		l.cache.append(ents, sizes, prevLast)
		l.last.Store(newLast)
	}
	return nil
}

// sync makes every append so far durable.
func (l *RaftLog) sync() error {
	if err := l.w.Sync(); err != nil {
		return l.fail("sync", err)
	}
	return nil
}

// Compact discards the entries up to and including index. The caller
// guarantees index <= the durably applied index.
//
// It returns raft.ErrCompacted if index is at or below the truncation
// point, and an error wrapping raft.ErrUnavailable if index is beyond
// LastIndex (raft.MemoryStorage panics there).
func (l *RaftLog) Compact(index uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if index <= l.truncIndex {
		return raft.ErrCompacted
	}
	if last := l.last.Load(); index > last {
		return fmt.Errorf("storage: compact %d beyond last index %d: %w", index, last, raft.ErrUnavailable)
	}
	term, err := l.termLocked(index)
	if err != nil {
		return err
	}
	// The WAL syncs the compaction only when it drops a segment: losing
	// it in a crash otherwise leaves the old entries and truncation
	// point in place, a valid log.
	if err := l.w.Compact(index); err != nil {
		return l.fail("compact", err)
	}
	l.truncIndex, l.truncTerm = index, term
	l.cache.dropThrough(index)
	l.first.Store(index + 1)
	return nil
}

func (l *RaftLog) lastIndexNoErr() uint64 { return l.last.Load() }

// reset empties the log and makes it start after meta, durably (a
// snapshot was installed, or the cell bootstrapped). hs, if not nil, is
// the new hard state; if nil, the persisted commit index is raised to
// meta's index: after a restart raft requires commit >= the snapshot's
// index, and the hard state that would say so may only be written after
// the snapshot.
func (l *RaftLog) reset(meta *pb.SnapshotMetadata, hs *pb.HardState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hs == nil {
		hs = l.resetHardState(meta)
	}
	if err := l.w.Reset(meta.GetIndex(), meta.GetTerm(), hs); err != nil {
		return l.fail("reset", err)
	}
	if hs != nil {
		l.hardState = hs
	}
	l.truncIndex, l.truncTerm = meta.GetIndex(), meta.GetTerm()
	l.cache.reset()
	// Last first: a lock-free reader between the two stores then sees
	// the old first index with the new last, still a sensible range.
	l.last.Store(l.truncIndex)
	l.first.Store(l.truncIndex + 1)
	return nil
}

// resetHardState returns the hard state to persist when the log is reset
// to meta, or nil if the current one already commits meta's index.
func (l *RaftLog) resetHardState(meta *pb.SnapshotMetadata) *pb.HardState {
	if l.hardState.GetCommit() >= meta.GetIndex() {
		return nil
	}
	return &pb.HardState{
		Term:   new(l.hardState.GetTerm()),
		Vote:   new(l.hardState.GetVote()),
		Commit: new(meta.GetIndex()),
	}
}

// reconcile brings the log in line with the state machine at Open. The
// state machine's writes are synced apart from the log's (before a
// snapshot's log reset, before a compaction, and whenever Pebble syncs),
// so a crash may leave it ahead of the log: applied up to an index the
// log no longer reaches (an append lost that was applied once a quorum
// held it), or past a snapshot install whose log reset was lost. Both
// are healed as the install would have: the log restarts after the
// applied entry, which the cell committed. A log that holds the applied
// entry only gets its commit index raised, as raft requires commit >=
// applied.
func (l *RaftLog) reconcile(applied, appliedTerm uint64) error {
	l.mu.Lock()
	p, err := planReconcile(l.hardState, l.truncIndex, l.last.Load(), l.termAtLocked, applied, appliedTerm)
	l.mu.Unlock()
	switch {
	case err != nil:
		return err
	case p.reset:
		return l.reset(&pb.SnapshotMetadata{Index: new(applied), Term: new(appliedTerm)}, p.hs)
	case p.hs != nil:
		return l.Append(p.hs, nil, true)
	}
	return nil
}

// reconcilePlan is what reconcile writes.
type reconcilePlan struct {
	hs    *pb.HardState // the hard state to write; nil = none
	reset bool          // the log restarts after the applied entry
}

// planReconcile decides what reconcile does to a log with hard state
// cur, truncation point trunc and last index last, where termAt answers
// for indexes in [trunc, last], given the state machine's applied index
// and term. It reads nothing else and writes nothing, so Open can check
// where the log would end up before anything is written.
func planReconcile(cur *pb.HardState, trunc, last uint64, termAt func(uint64) (uint64, error),
	applied, appliedTerm uint64) (reconcilePlan, error) {
	if applied == 0 {
		return reconcilePlan{}, nil
	}
	if applied < trunc {
		// The log is compacted or reset only after the state machine
		// synced past that point: its applied state was lost.
		return reconcilePlan{}, fmt.Errorf("%w: state machine applied up to %d, but the log starts after %d", ErrLostState, applied, trunc)
	}
	var holds bool
	if applied <= last {
		term, err := termAt(applied)
		if err != nil {
			return reconcilePlan{}, err
		}
		holds = term == appliedTerm
	}
	// Raft needs commit >= applied. A term below the applied entry's is
	// raised too, without a vote (none was cast in it), as a founding
	// member's bootstrap would have.
	hs := &pb.HardState{
		Term:   new(cur.GetTerm()),
		Vote:   new(cur.GetVote()),
		Commit: new(max(cur.GetCommit(), applied)),
	}
	if cur.GetTerm() < appliedTerm {
		hs.Term, hs.Vote = new(appliedTerm), new(uint64(0))
	}
	if !holds {
		return reconcilePlan{hs: hs, reset: true}, nil
	}
	if hs.GetTerm() == cur.GetTerm() && hs.GetVote() == cur.GetVote() && hs.GetCommit() == cur.GetCommit() {
		return reconcilePlan{}, nil
	}
	return reconcilePlan{hs: hs}, nil
}

// after returns the term, vote and last index of a log with hard state
// cur and last index last once p is carried out.
func (p reconcilePlan) after(cur *pb.HardState, last, applied uint64) (term, vote, newLast uint64) {
	hs := cur
	if p.hs != nil {
		hs = p.hs
	}
	if p.reset {
		last = applied
	}
	return hs.GetTerm(), hs.GetVote(), last
}

// termAtLocked is Term for an index in [truncIndex, last], under mu.
func (l *RaftLog) termAtLocked(i uint64) (uint64, error) {
	if i == l.truncIndex {
		return l.truncTerm, nil
	}
	return l.termLocked(i)
}

// SegmentCuts reports how many log segments this store started since it
// opened, and how many of those wrote their zeros on the append path
// because no segment was prepared ahead (storage/wal's prepare.go): each
// of those held the member's commits while it filled.
func (r *RaftLog) SegmentCuts() (cuts, inline uint64) {
	st := r.w.Stats()
	return st.Cuts, st.InlineCuts
}
