package raftnode

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
	pb "go.etcd.io/raft/v3/raftpb"
)

// applyJob is one unit of work for the apply loop, in log order.
type applyJob struct {
	ents []*pb.Entry
	cs   *pb.ConfState // the conf state after ents, when they changed it
	// snap, when set, is a snapshot the raft loop has just installed: the
	// state machine jumped to its index.
	snap *pb.Snapshot
	// barrier, when set, is closed once every earlier job is done.
	barrier chan struct{}
}

// appliedIndex is the member's applied index with waiters for it.
type appliedIndex struct {
	idx   atomic.Uint64
	mu    sync.Mutex
	waits []indexWait
}

type indexWait struct {
	index uint64
	ch    chan struct{}
}

func (a *appliedIndex) init(idx uint64) { a.idx.Store(idx) }

func (a *appliedIndex) get() uint64 { return a.idx.Load() }

// wait returns a channel closed once index is applied, or nil if it is.
func (a *appliedIndex) wait(index uint64) <-chan struct{} {
	if a.idx.Load() >= index {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.idx.Load() >= index {
		return nil
	}
	ch := make(chan struct{})
	a.waits = append(a.waits, indexWait{index, ch})
	return ch
}

func (a *appliedIndex) set(idx uint64) {
	a.mu.Lock()
	a.idx.Store(idx)
	keep := a.waits[:0]
	for _, w := range a.waits {
		if w.index <= idx {
			close(w.ch)
		} else {
			keep = append(keep, w)
		}
	}
	clear(a.waits[len(keep):])
	a.waits = keep
	a.mu.Unlock()
}

// applySide owns the hand-off between the raft loop and the apply loop.
// The state machine, the watch hub behind OnApply and the compaction
// bookkeeping belong to whichever of the two holds the apply side: the
// apply loop while it has jobs queued or running, the raft loop (for an
// inline apply) only when none is. The count of jobs handed over and not
// yet done is what tells them apart.
type applySide struct {
	jobs chan applyJob
	// queued counts the jobs handed to the apply loop and not yet done.
	queued atomic.Int64
	// lastCompact is the applied index of the last log compaction, and
	// answers the buffer the answers of an applied batch are gathered
	// in; only the holder of the apply side touches them.
	lastCompact uint64
	answers     []answer
	// inlineCooldown counts down the batches that go to the apply loop
	// after a slow inline apply; the raft loop's.
	inlineCooldown int
}

func (a *applySide) init(applied uint64) {
	a.jobs = make(chan applyJob, 64)
	a.lastCompact = applied
}

// idle reports whether the apply loop has nothing queued or running, so
// the raft loop may hold the apply side. Only the raft loop hands jobs
// over, so the answer stays true until it does.
func (a *applySide) idle() bool { return a.queued.Load() == 0 }

// applyLoop applies the jobs the raft loop hands over, in order (see
// handOver and applyInline). Raft may already have moved on (Advance does
// not wait for apply); order is all that matters.
func (n *Node) applyLoop() {
	if !n.gate.enter(n.stopc) {
		return
	}
	for {
		var job applyJob
		n.gate.exit()
		select {
		case job = <-n.applySide.jobs:
		case <-n.stopc:
			return
		}
		if !n.gate.enter(n.stopc) {
			return
		}
		ok, _ := n.apply(job, 0)
		// Only after the job's every effect: the raft loop reads zero as
		// "the apply loop is idle, its state is mine to use".
		n.applySide.queued.Add(-1)
		if !ok {
			return
		}
	}
}

// apply applies one job: it applies committed entries, feeds the watch
// hub and wakes the callers whose commands applied. It runs on the apply
// loop, or on the raft loop while the apply loop is idle; never on both.
// It returns false when the node must stop. With a read budget (the
// raft loop's: inlineMaxReads), entries whose reads pass it are not
// applied at all (storage.ApplyWithin) and spent is true: the job must
// go to the apply loop.
func (n *Node) apply(job applyJob, budget int64) (ok, spent bool) {
	switch {
	case job.barrier != nil:
		close(job.barrier)
	case job.snap != nil:
		idx := job.snap.GetMetadata().GetIndex()
		n.reloadMembers()
		n.applied.set(idx)
		n.applySide.lastCompact = idx
		if n.cfg.OnSnapshot != nil {
			n.cfg.OnSnapshot()
		}
		if n.removedHere() {
			return false, false
		}
	default:
		start := time.Now()
		var (
			out storage.ApplyOutput
			err error
		)
		if budget > 0 {
			out, err = n.sm.ApplyWithin(job.ents, job.cs, budget)
		} else {
			out, err = n.sm.Apply(job.ents, job.cs)
		}
		n.counters.apply.observe(time.Since(start))
		if errors.Is(err, storage.ErrApplyBudget) {
			n.counters.inlineSpent.Add(1)
			return true, true
		}
		if err != nil {
			n.fail(err)
			return false, false
		}
		as := n.applySide.answers[:0]
		if out.MembersChanged {
			n.reloadMembers()
			as = n.c.ConfApplied(job.ents, as)
		}
		if n.cfg.OnApply != nil {
			n.cfg.OnApply(out)
		}
		as = n.c.Applied(out.Results, as)
		deliverAll(as)
		clear(as)
		n.applySide.answers = as[:0]
		last := job.ents[len(job.ents)-1].GetIndex()
		n.applied.set(last)
		if last-n.applySide.lastCompact >= n.cfg.CompactEvery {
			if err := n.compact(last); err != nil {
				n.fail(err)
				return false, false
			}
			n.applySide.lastCompact = last
		}
		// After every caller of the batch was answered (RemoveMember of
		// this very member included): its own removal stops it.
		if out.MembersChanged && n.removedHere() {
			return false, false
		}
	}
	return true, false
}

// handOver queues job for the apply loop. It returns false when the node
// stopped.
func (n *Node) handOver(job applyJob) bool {
	n.applySide.queued.Add(1)
	// The apply loop may be behind, or paused.
	return handTo(n, n.applySide.jobs, job)
}

// Inline applies: the raft loop applies a batch itself when that is cheap
// and nothing is queued for the apply loop, which saves a goroutine
// hand-off per batch on every member and lets the leader's next batch
// grow meanwhile (the put and lock benchmarks gain 15 to 30%). A batch
// qualifies when it is small and every command's cost is bounded by its
// size (command.Bounded: no prefix delete, no session end), so
// heartbeats are never held up for long; conf changes go the usual way.
// Transactions' reads are the exception Bounded lets through (a lock
// reads its queue): what the state machine reads for them on the raft
// goroutine is bounded by inlineMaxReads, past which it stops, having
// applied nothing, and the batch goes to the apply loop.
const (
	inlineMaxEntries = 1024
	inlineMaxBytes   = 1 << 20
	// inlineMaxReads bounds the reads of one inline apply, in
	// command.ReadCost units: about 6,000 keys of 100 bytes, tens of
	// lock queues' reads, a millisecond or two of copying.
	inlineMaxReads = 1 << 20
	// inlineCooldown is how many batches go to the apply loop after an
	// inline apply took longer than a tick, whatever made it slow.
	inlineCooldown = 1000
)

// applyInline applies job on the raft goroutine if it qualifies. It
// returns handled=false when the job must be handed over instead, and
// ok=false when the node must stop.
func (n *Node) applyInline(job applyJob) (handled, ok bool) {
	if n.applySide.inlineCooldown > 0 {
		n.applySide.inlineCooldown--
		return false, true
	}
	if !n.applySide.idle() || !inlineable(job) {
		return false, true
	}
	start := time.Now()
	ok, spent := n.apply(job, inlineMaxReads)
	if !ok {
		return true, false
	}
	if spent {
		return false, true
	}
	if took := time.Since(start); took > n.cfg.TickInterval {
		n.applySide.inlineCooldown = inlineCooldown
		n.log.Debug("slow inline apply; handing batches to the apply loop for a while", "took", took, "entries", len(job.ents))
	}
	return true, true
}

// inlineable reports whether job is small and cheap enough to apply on
// the raft goroutine.
func inlineable(job applyJob) bool {
	if job.cs != nil || job.ents == nil || len(job.ents) > inlineMaxEntries {
		return false
	}
	size := 0
	for _, e := range job.ents {
		data := e.GetData()
		size += len(data)
		if e.GetType() != pb.EntryNormal || size > inlineMaxBytes || (len(data) > 0 && !command.Bounded(data)) {
			return false
		}
	}
	return true
}

// compact discards log entries the state machine no longer needs, keeping
// CatchUpEntries of them for followers that lag a little. The applied
// state is synced first: the log is what would replay it after a crash.
func (n *Node) compact(applied uint64) error {
	if applied <= n.cfg.CatchUpEntries {
		return nil
	}
	upTo := applied - n.cfg.CatchUpEntries
	// Entries apply once a quorum holds them, possibly before this
	// member's own append is durable: never discard past what it holds.
	upTo = min(upTo, n.persist.last.Load())
	first, err := n.store.RaftLog().FirstIndex()
	if err != nil || upTo < first {
		return err
	}
	if err := n.store.Sync(); err != nil {
		return err
	}
	if err := n.store.RaftLog().Compact(upTo); err != nil {
		n.log.Warn("log compaction failed", "index", upTo, "err", err)
	}
	return nil
}
