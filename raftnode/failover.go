package raftnode

import (
	"math/rand/v2"
	"slices"

	"github.com/coordcell/coord/transport"
	"go.etcd.io/raft/v3"
)

// Failover faster than timeouts. A crashed process's connections close at
// once, long before a follower's election timeout runs out. A transport
// that can tell (transport.PeerWatcher) lets the raft loop act on it: when
// a connection with the leader is closed by the leader's side, and the
// transport still has no connection with the leader a few heartbeats
// later, the follower campaigns (a pre-vote) instead of waiting out a
// randomized election timeout.
//
// This cannot disrupt a leader that is alive and reachable. The follower
// stands only while no connection with the leader is open, re-checked at
// the moment of standing: a live leader redials on its next heartbeat,
// and a connection that still delivers is open. Even a pre-vote that goes
// out wins nothing unless a quorum has also stopped hearing from the
// leader (CheckQuorum makes members in touch with a leader ignore it), and
// a leader that hears nothing from a quorum steps down by itself. A
// partition or a dead host closes no connection, so it still fails over
// by the timeout.
//
// The survivors stand in turns, a heartbeat apart, in the order of their
// IDs, and again in later rounds until one leads: the first one's pre-vote
// is ignored by those still within the leader's lease, the next one finds
// the first out of it (a pre-candidate follows nobody) and wins, unless
// its log is behind the first one's; then the first one wins its second
// round. A round after a split vote comes a random part of a heartbeat
// later, so two survivors do not stand together twice in a row.

// lossWait is how many heartbeat intervals the first survivor waits for
// the leader to redial before it stands: a live leader whose connection
// closed sends again within one, after a short redial backoff.
const lossWait = 2

// leaderLoss is the raft loop's record of a leader whose connection was
// closed by its side.
type leaderLoss struct {
	name  string // "" = none
	id    uint64
	first uint64 // tick of the report
	at    uint64 // tick of this member's next stand
	// patient is the term in which this member already let a candidate
	// it voted for have a round.
	patient uint64
}

// watchPeers subscribes to the transport's reports of closed
// connections, if it makes them.
func (n *Node) watchPeers() {
	w, ok := n.tr.(transport.PeerWatcher)
	if !ok {
		return
	}
	n.peerWatch = w
	w.OnPeerDown(func(peer string) {
		select {
		case n.peerDownc <- peer:
		default:
			// A burst of reports: one is enough, the loop asks the
			// transport for the connection's state itself.
		}
	})
}

// peerDown notes that a connection with peer was closed by its side; it
// matters only if peer leads.
func (n *Node) peerDown(ls *loopState, peer string) {
	if ls.lead == 0 || ls.lead == n.id || ls.loss.name == peer {
		return
	}
	name, ok := n.MemberName(ls.lead)
	if !ok || name != peer {
		return
	}
	rank, _ := n.survivorRank(ls.lead)
	if rank < 0 {
		return // a learner never stands
	}
	hb := n.heartbeat()
	ls.loss = leaderLoss{name: peer, id: ls.lead, first: ls.tick, at: ls.tick + hb*uint64(lossWait+rank)}
	n.log.Info("the leader closed its connection; standing unless it reconnects",
		"leader", peer, "in_ticks", ls.loss.at-ls.tick)
}

// survivorRank returns this member's place among the voters other than
// lead, ordered by ID, and their number; -1 if it is not a voter.
func (n *Node) survivorRank(lead uint64) (rank, others int) {
	voters := n.sm.ConfState().GetVoters()
	ids := make([]uint64, 0, len(voters))
	for _, id := range voters {
		if id != lead {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Index(ids, n.id), len(ids)
}

func (n *Node) heartbeat() uint64 { return uint64(max(n.cfg.HeartbeatTicks, 1)) }

// checkLeaderLoss runs on each tick: while the lost leader has no
// connection with this member and nobody else leads, it campaigns in
// this member's turns.
func (n *Node) checkLeaderLoss(ls *loopState) {
	loss := &ls.loss
	if loss.name == "" {
		return
	}
	switch {
	case ls.lead != 0 && ls.lead != loss.id:
		ls.loss = leaderLoss{} // a new leader
		return
	case n.peerWatch.Connected(loss.name):
		// Redialled, or still delivering: the leader's process lives.
		n.log.Info("the leader's connection is back; not standing", "leader", loss.name)
		ls.loss = leaderLoss{}
		return
	case ls.tick-loss.first > 2*uint64(n.cfg.ElectionTicks):
		ls.loss = leaderLoss{} // Raft's own timeout has had its turn
		return
	case ls.tick < loss.at:
		return
	}
	rank, others := n.survivorRank(loss.id)
	if rank < 0 {
		ls.loss = leaderLoss{}
		return
	}
	hb := n.heartbeat()
	period := hb*uint64(others) + rand.Uint64N(hb+1)
	loss.at = ls.tick + period
	bs := n.rn.BasicStatus()
	term := bs.HardState.GetTerm()
	if v := bs.HardState.GetVote(); ls.lead == 0 && bs.RaftState == raft.StateFollower &&
		v != 0 && v != n.id && v != loss.id && loss.patient != term {
		// Another survivor campaigns with this member's vote: let it
		// finish before standing against it. (A vote for the lost leader
		// is the one that elected it.)
		loss.patient = term
		return
	}
	n.log.Info("the leader's connection closed and it has not come back; campaigning",
		"leader", loss.name, "ticks_since_report", ls.tick-loss.first)
	if err := n.rn.Campaign(); err != nil {
		n.log.Warn("early campaign", "err", err)
	}
}
