package raftnode

import (
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/transport"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// flushProposals hands every pending proposal to Raft in one MsgProp, so
// that a burst of callers costs one append (and one fsync) on the leader.
func (c *core) flushProposals() {
	// Callers that gave up while their proposal waited here were told it
	// did not happen (ErrNoQuorum): theirs are dropped, not proposed.
	c.pending = c.waiters.markHanded(c.pending)
	if len(c.pending) == 0 {
		return
	}
	// One slab for the flush, not one entry per proposal. It is never
	// reused: the leader clones what it appends (raft.appendEntry), but a
	// follower forwards this very message, entries and all, to its leader
	// in a later Ready, so raft may hold these entries past the Step.
	slab := make([]pb.Entry, len(c.pending))
	ents := make([]*pb.Entry, len(c.pending))
	for i, p := range c.pending {
		slab[i].Data = p.data
		ents[i] = &slab[i]
	}
	err := c.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(c.id), Entries: ents})
	if errors.Is(err, raft.ErrProposalDropped) {
		// Raft refused them (leadership transfer, no leader yet, too much
		// uncommitted): they certainly did not happen; try again next tick.
		for _, p := range c.pending {
			p.handed.Store(false)
		}
		return
	}
	if err != nil {
		for _, p := range c.pending {
			c.answerErr(p, fmt.Errorf("%w: propose: %v", errs.Internal, err))
		}
	}
	c.markSent(c.pending)
	c.handed = append(c.handed, c.pending...)
	clear(c.pending)
	c.pending = c.pending[:0]
}

// onTick runs the bookkeeping counted in ticks.
func (c *core) onTick() {
	et := uint64(c.cfg.ElectionTicks)
	c.checkLeaderLoss()
	c.noteContact()
	c.expireStrangers()
	if c.lead == 0 && c.tick-c.leaderlessSince > 3*et && c.tick > 3*et {
		// No leader for several election timeouts: we are on a minority
		// side (or the cell has lost quorum). Say so instead of hanging,
		// to each caller that has itself waited that long: one that came
		// just now (say, to a member that has not heard a leader since
		// it started, while the cell elects one) waits its own three.
		by := c.tick - 3*et - 1
		keep := c.pending[:0]
		for _, p := range c.pending {
			if p.queuedTick <= by {
				c.answerErr(p, errs.NoQuorum)
			} else {
				keep = append(keep, p)
			}
		}
		clear(c.pending[len(keep):])
		c.pending = keep
		c.reads.failQueuedBy(by, errs.NoQuorum, &c.out.Answers)
	}
	if c.lead != 0 {
		c.retryRefused()
		c.flushProposals()
		c.resendDue(c.resendAll)
		c.resendAll = false
		c.retryReads(et)
		c.issueReads()
		c.retryConfChanges()
	}
	// Forget handed proposals that have applied (their waiter is gone).
	if c.tick%8 == 0 {
		c.handed = c.waiters.stillWaiting(c.handed)
	}
}

// noteLeader tracks leadership changes for the proposal bookkeeping.
func (c *core) noteLeader(lead, term uint64) {
	if lead == c.lead && term == c.term {
		return
	}
	if lead == 0 && c.lead != 0 {
		c.leaderlessSince = c.tick
	}
	if term != c.term && len(c.handed) > 0 {
		// Commands handed to the old leader may be lost with it, or may
		// still commit under the new one: hand them all again to the new
		// one, which applies each once (resend.go).
		c.resendAll = true
	}
	if lead != 0 {
		c.counters.leaderChanges.Add(1)
	}
	c.lead, c.term = lead, term
	c.out.LeaderChanged, c.out.Lead, c.out.Term = true, lead, term
}

// applyConfChanges applies the membership changes among ents to Raft and
// returns the resulting conf state (nil if none changed it). Raft's own
// view changes here; the state machine persists the result with the
// applied index.
func (c *core) applyConfChanges(ents []*pb.Entry) *pb.ConfState {
	var cs *pb.ConfState
	for _, e := range ents {
		var cc pb.ConfChangeI
		switch e.GetType() {
		case pb.EntryConfChange:
			var v1 pb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &v1); err != nil {
				c.log.Error("undecodable conf change; skipped", "index", e.GetIndex(), "err", err)
				continue
			}
			cc = &v1
		case pb.EntryConfChangeV2:
			var v2 pb.ConfChangeV2
			if err := proto.Unmarshal(e.GetData(), &v2); err != nil {
				c.log.Error("undecodable conf change; skipped", "index", e.GetIndex(), "err", err)
				continue
			}
			cc = &v2
		default:
			continue
		}
		cs = c.rn.ApplyConfChange(cc)
	}
	return cs
}

// handleEnvelope decodes, admits and validates one envelope, and steps
// it or turns it into what the next Ready says.
func (c *core) handleEnvelope(env transport.Envelope) {
	d, err := decodeEnvelope(env.Data)
	if err != nil {
		c.dropped(env.From, "envelope", err)
		return
	}
	if !c.admit(env.From, d) {
		return
	}
	switch {
	case d.raft != nil:
		c.stepFromWire(env.From, d.raft)
	case d.chunk != nil:
		if err := c.checkChunk(env.From, d.chunk); err != nil {
			c.dropped(env.From, "snapshot chunk", err)
			return
		}
		c.out.Chunks = append(c.out.Chunks, d.chunk)
	case d.ack != nil:
		if err := c.checkAck(env.From, d.ack); err != nil {
			c.dropped(env.From, "snapshot chunk ack", err)
			return
		}
		c.out.Acks = append(c.out.Acks, d.ack)
	case d.app != nil:
		c.out.Apps = append(c.out.Apps, appMessage{from: env.From, data: d.app})
	}
}

// send queues envelopes of this package's own (notices, probes, rejects)
// for the next Ready.
func (c *core) send(envs ...transport.Envelope) {
	c.out.Envelopes = append(c.out.Envelopes, envs...)
}
