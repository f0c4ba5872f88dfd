package raftnode

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/coordcell/coord/internal/errs"
)

// readRequest is one caller waiting for a read index.
type readRequest struct {
	resc chan readResult // buffered 1
	// queuedTick is when it reached the core (the driver's).
	queuedTick uint64
}

type readResult struct {
	index uint64
	err   error
}

// readBatch is one ReadIndex round in flight: every request that queued
// while the previous round was out shares it (read-index batching).
type readBatch struct {
	rctx   uint64
	reqs   []*readRequest
	sentAt uint64 // tick count
}

// ReadBarrier returns once this member's state reflects every write that
// completed before the call: it gets a read index from the leader
// (confirmed by a heartbeat round, ReadOnlySafe) and waits until it has
// applied it. Any member can serve linearizable reads this way.
func (n *Node) ReadBarrier(ctx context.Context) error {
	req := &readRequest{resc: make(chan readResult, 1)}
	select {
	case n.readc <- req:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
	case <-n.stopc:
		return n.errStopped()
	}
	var idx uint64
	select {
	case r := <-req.resc:
		if r.err != nil {
			return r.err
		}
		idx = r.index
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
	case <-n.stopc:
		return n.errStopped()
	}
	return n.WaitApplied(ctx, idx)
}

// WaitApplied waits until this member has applied index.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	ch := n.applied.wait(index)
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return n.errStopped()
	}
}

// AppliedIndex returns the index of the last entry this member applied.
func (n *Node) AppliedIndex() uint64 { return n.applied.get() }

// readState is the core's bookkeeping of read-index rounds.
type readState struct {
	queued   []*readRequest
	inflight *readBatch
	nextCtx  uint64
}

// issueReads starts a round for every queued request if none is in
// flight.
func (c *core) issueReads() {
	rs := &c.reads
	if rs.inflight != nil || len(rs.queued) == 0 {
		return
	}
	rs.nextCtx++
	rs.inflight = &readBatch{rctx: rs.nextCtx, reqs: rs.queued, sentAt: c.tick}
	rs.queued = nil
	var rctx [8]byte
	binary.BigEndian.PutUint64(rctx[:], rs.inflight.rctx)
	c.rn.ReadIndex(rctx[:])
}

// retryReads re-issues a round that got no answer within after ticks:
// Raft drops read-index requests silently when leadership changes or no
// leader is known.
func (c *core) retryReads(after uint64) {
	rs := &c.reads
	if rs.inflight == nil || c.tick-rs.inflight.sentAt < after {
		return
	}
	rs.queued = append(rs.inflight.reqs, rs.queued...)
	rs.inflight = nil
	c.issueReads()
}

// completeRead answers the round rctx names with its read index.
func (c *core) completeRead(rctx []byte, index uint64) {
	rs := &c.reads
	if rs.inflight == nil || len(rctx) != 8 || binary.BigEndian.Uint64(rctx) != rs.inflight.rctx {
		return
	}
	for _, r := range rs.inflight.reqs {
		c.out.Answers = append(c.out.Answers, answer{read: r, index: index})
	}
	rs.inflight = nil
}

// failAll answers every pending read with err, appended to as.
func (rs *readState) failAll(err error, as *[]answer) { rs.failQueuedBy(^uint64(0), err, as) }

// failQueuedBy answers with err, appended to as, every pending read that
// reached the core at tick by or before; the others stay queued.
func (rs *readState) failQueuedBy(by uint64, err error, as *[]answer) {
	if rs.inflight != nil {
		rs.queued = append(rs.inflight.reqs, rs.queued...)
		rs.inflight = nil
	}
	keep := rs.queued[:0]
	for _, r := range rs.queued {
		if r.queuedTick <= by {
			*as = append(*as, answer{read: r, err: err})
		} else {
			keep = append(keep, r)
		}
	}
	clear(rs.queued[len(keep):])
	rs.queued = keep
	if len(rs.queued) == 0 {
		rs.queued = nil
	}
}
