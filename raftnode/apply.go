package raftnode

import (
	"sync"
	"sync/atomic"

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

// applyLoop applies committed entries in order, feeds the watch hub and
// wakes the callers whose commands applied. Raft may already have moved
// on (Advance does not wait for apply); order is all that matters.
func (n *Node) applyLoop() {
	lastCompact := n.applied.get()
	for {
		var job applyJob
		select {
		case job = <-n.applyc:
		case <-n.stopc:
			return
		}
		switch {
		case job.barrier != nil:
			close(job.barrier)
		case job.snap != nil:
			idx := job.snap.GetMetadata().GetIndex()
			n.reloadMembers()
			n.applied.set(idx)
			lastCompact = idx
			if n.cfg.OnSnapshot != nil {
				n.cfg.OnSnapshot()
			}
		default:
			out, err := n.sm.Apply(job.ents, job.cs)
			if err != nil {
				n.fail(err)
				return
			}
			if out.MembersChanged {
				n.reloadMembers()
				n.confs.applied(job.ents)
			}
			if n.cfg.OnApply != nil {
				n.cfg.OnApply(out)
			}
			for _, a := range out.Results {
				if a.ID != 0 {
					n.waiters.deliver(a.ID, proposalResult{res: a.Result})
				}
			}
			last := job.ents[len(job.ents)-1].GetIndex()
			n.applied.set(last)
			if last-lastCompact >= n.cfg.CompactEvery {
				if err := n.compact(last); err != nil {
					n.fail(err)
					return
				}
				lastCompact = last
			}
		}
	}
}

// compact discards log entries the state machine no longer needs, keeping
// CatchUpEntries of them for followers that lag a little. The applied
// state is synced first: the log is what would replay it after a crash.
func (n *Node) compact(applied uint64) error {
	if applied <= n.cfg.CatchUpEntries {
		return nil
	}
	upTo := applied - n.cfg.CatchUpEntries
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
