package raftnode

import (
	"errors"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Proposals refused during a leadership transfer. While it hands over,
// the old leader drops every proposal a follower forwards (so does a
// member between leaders): the follower cannot tell, and its callers
// would wait out the grace period for an ErrAmbiguous although their
// commands certainly did not happen. The member that refused them keeps
// them instead, briefly and within a byte bound, and proposes them again
// once a leader is known: the new leader when the transfer went through,
// itself when it did not. Raft appended none of them, so each can still
// apply at most once.

const (
	// refusedMaxBytes bounds the proposals kept for one hand-over.
	refusedMaxBytes = 32 << 20
)

// refusedProps is the core's store of proposals Raft refused.
type refusedProps struct {
	ents  []*pb.Entry
	bytes int
	since uint64 // tick the oldest was refused
}

// keep stores the commands of a forwarded proposal Raft refused, unless
// that would pass the byte bound.
func (r *refusedProps) keep(m *pb.Message, tick uint64) {
	size := 0
	for _, e := range m.GetEntries() {
		size += len(e.GetData())
	}
	if r.bytes+size > refusedMaxBytes {
		return
	}
	if len(r.ents) == 0 {
		r.since = tick
	}
	r.ents = append(r.ents, m.GetEntries()...)
	r.bytes += size
}

// retryRefused proposes the kept commands again once a leader is known,
// and forgets them after an election timeout: by then their callers have
// had other news (the followers' own grace period runs from the leader
// change).
func (c *core) retryRefused() {
	r := &c.refused
	if len(r.ents) == 0 || c.lead == 0 {
		return
	}
	if c.tick-r.since > uint64(c.cfg.ElectionTicks) {
		*r = refusedProps{}
		return
	}
	err := c.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(c.id), Entries: r.ents})
	if errors.Is(err, raft.ErrProposalDropped) {
		return // still handing over: next time
	}
	*r = refusedProps{}
}

// transferTarget starts handing leadership to the most up-to-date voter
// in touch (the lowest ID of equals, so that cores driven alike choose
// alike), when this member leads, and reports whether it did.
func (c *core) transferTarget() bool {
	var best, bestMatch uint64
	for id, pr := range c.rn.Status().Progress {
		// Only a voter that is in touch can take over; with none (the
		// last member of a cell closing) there is nobody to wait for.
		// (RecentActive alone is cleared every election timeout, so a
		// follower that is replicating counts too.)
		inTouch := pr.RecentActive || pr.State == tracker.StateReplicate
		better := pr.Match > bestMatch || (pr.Match == bestMatch && (best == 0 || id < best))
		if id != c.id && !pr.IsLearner && inTouch && better {
			best, bestMatch = id, pr.Match
		}
	}
	if best != 0 {
		c.rn.TransferLeader(best)
	}
	return best != 0
}

// transferTo starts handing leadership to voter id when this member
// leads, and reports whether it leads.
func (c *core) transferTo(id uint64) bool {
	if c.rn.BasicStatus().RaftState != raft.StateLeader {
		return false
	}
	if id != c.id {
		c.rn.TransferLeader(id)
	}
	return true
}
