package raftnode

import (
	"slices"

	"go.etcd.io/raft/v3"
)

// Failover faster than timeouts. A crashed process's connections close at
// once, long before a follower's election timeout runs out. A transport
// that can tell (peerDownReporter) lets the raft loop act on it: when the
// connection to the leader closes and the leader then stays silent for a
// heartbeat interval more, the follower runs its election clock forward
// so that its next tick starts a pre-vote instead of waiting the rest of
// a randomized timeout.
//
// This cannot disrupt a live leader: PreVote means a pre-candidate wins
// nothing unless a quorum has also stopped hearing from the leader
// (CheckQuorum makes members in touch with a leader ignore it), and a
// leader that hears nothing from a quorum steps down by itself. The
// survivors go one after another, a heartbeat apart, in the order of
// their IDs: the first one's pre-vote is ignored by those still within
// the leader's lease, the next one finds the first out of it (a
// pre-candidate follows nobody) and wins, and no two stand at once. A
// partition closes no connection, so it still fails over by the
// timeout.

// peerDownReporter is what a transport implements to report that its
// connection to or from a peer closed or failed. f is called from the
// transport's goroutines and must not block. It is optional: a transport
// without it fails over by the election timeout alone.
type peerDownReporter interface {
	OnPeerDown(f func(peer string))
}

// leaderLoss is the raft loop's record of a leader whose connection
// closed and which has not been heard from since.
type leaderLoss struct {
	name  string // "" = none
	id    uint64
	since uint64 // tick of the report
}

// watchPeers subscribes to the transport's connection losses, if it
// reports them.
func (n *Node) watchPeers() {
	r, ok := n.tr.(peerDownReporter)
	if !ok {
		return
	}
	r.OnPeerDown(func(peer string) {
		select {
		case n.peerDownc <- peer:
		default:
			// A burst of reports: one is enough, the loop checks the
			// leader's silence itself.
		}
	})
}

// peerDown notes that the connection to peer closed; it matters only if
// peer leads.
func (n *Node) peerDown(ls *loopState, peer string) {
	if ls.lead == 0 || ls.lead == n.id {
		return
	}
	if name, ok := n.MemberName(ls.lead); ok && name == peer {
		ls.loss = leaderLoss{name: peer, id: ls.lead, since: ls.tick}
	}
}

// heardFrom clears a recorded loss once the leader speaks again: the
// connection came back, the leader lives.
func (ls *loopState) heardFrom(peer string) {
	if ls.loss.name != "" && ls.loss.name == peer {
		ls.loss = leaderLoss{}
	}
}

// checkLeaderLoss runs on each tick: once the lost leader has stayed
// silent past this member's turn, it runs the election clock forward.
func (n *Node) checkLeaderLoss(ls *loopState) {
	if ls.loss.name == "" {
		return
	}
	if ls.lead != ls.loss.id {
		ls.loss = leaderLoss{} // someone else leads, or an election runs
		return
	}
	voters := n.sm.ConfState().GetVoters()
	others := make([]uint64, 0, len(voters))
	for _, id := range voters {
		if id != ls.loss.id {
			others = append(others, id)
		}
	}
	slices.Sort(others)
	rank := slices.Index(others, n.id)
	if rank < 0 {
		ls.loss = leaderLoss{} // a learner never stands
		return
	}
	hb := uint64(max(n.cfg.HeartbeatTicks, 1))
	if ls.tick-ls.loss.since < hb*uint64(1+rank) {
		return
	}
	ls.loss = leaderLoss{}
	n.log.Info("connection to the leader closed and the leader is silent; starting an election early",
		"leader", ls.lead)
	// At most two election timeouts of ticks: the randomized timeout is
	// below that, so the follower campaigns (raft ticks do nothing else
	// of note for a follower).
	for range 2 * n.cfg.ElectionTicks {
		if n.rn.BasicStatus().RaftState != raft.StateFollower {
			break
		}
		n.rn.Tick()
	}
}
