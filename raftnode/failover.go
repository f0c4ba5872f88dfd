package raftnode

import (
	"slices"

	"github.com/coordcell/coord/transport"
	"go.etcd.io/raft/v3"
)

// Failover faster than timeouts. A crashed process's connections close at
// once, long before a follower's election timeout runs out. A transport
// that can tell (transport.PeerWatcher) lets the core act on it: when
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

// leaderLoss is the core's record of a leader whose connection was
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
	w.OnPeerDown(func(peer string) {
		select {
		case n.peerDownc <- peer:
		default:
			// A burst of reports: one is enough, the loop asks the
			// transport for the connection's state itself.
		}
	})
}

// PeerDown notes that a connection with peer was closed by its side; it
// matters only if peer leads, and only if the transport can tell
// whether it reconnected (coreConfig.Connected).
func (c *core) PeerDown(peer string) {
	if c.cfg.Connected == nil || c.lead == 0 || c.lead == c.id || c.loss.name == peer {
		return
	}
	name, ok := c.book.name(c.lead)
	if !ok || name != peer {
		return
	}
	rank, _ := c.survivorRank(c.lead)
	if rank < 0 {
		return // a learner never stands
	}
	hb := c.heartbeat()
	c.loss = leaderLoss{name: peer, id: c.lead, first: c.tick, at: c.tick + hb*uint64(lossWait+rank)}
	c.log.Info("the leader closed its connection; standing unless it reconnects",
		"leader", peer, "in_ticks", c.loss.at-c.tick)
}

// survivorRank returns this member's place among the voters other than
// lead, ordered by ID, and their number; -1 if it is not a voter.
func (c *core) survivorRank(lead uint64) (rank, others int) {
	voters := c.sm.ConfState().GetVoters()
	ids := make([]uint64, 0, len(voters))
	for _, id := range voters {
		if id != lead {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Index(ids, c.id), len(ids)
}

func (c *core) heartbeat() uint64 { return uint64(max(c.cfg.HeartbeatTicks, 1)) }

// checkLeaderLoss runs on each tick: while the lost leader has no
// connection with this member and nobody else leads, it campaigns in
// this member's turns.
func (c *core) checkLeaderLoss() {
	loss := &c.loss
	if loss.name == "" {
		return
	}
	switch {
	case c.lead != 0 && c.lead != loss.id:
		c.loss = leaderLoss{} // a new leader
		return
	case c.cfg.Connected(loss.name):
		// Redialled, or still delivering: the leader's process lives.
		c.log.Info("the leader's connection is back; not standing", "leader", loss.name)
		c.loss = leaderLoss{}
		return
	case c.tick-loss.first > 2*uint64(c.cfg.ElectionTicks):
		c.loss = leaderLoss{} // Raft's own timeout has had its turn
		return
	case c.tick < loss.at:
		return
	}
	rank, others := c.survivorRank(loss.id)
	if rank < 0 {
		c.loss = leaderLoss{}
		return
	}
	hb := c.heartbeat()
	period := hb*uint64(others) + c.rnd.Uint64N(hb+1)
	loss.at = c.tick + period
	bs := c.rn.BasicStatus()
	term := bs.HardState.GetTerm()
	if v := bs.HardState.GetVote(); c.lead == 0 && bs.RaftState == raft.StateFollower &&
		v != 0 && v != c.id && v != loss.id && loss.patient != term {
		// Another survivor campaigns with this member's vote: let it
		// finish before standing against it. (A vote for the lost leader
		// is the one that elected it.)
		loss.patient = term
		return
	}
	c.log.Info("the leader's connection closed and it has not come back; campaigning",
		"leader", loss.name, "ticks_since_report", c.tick-loss.first)
	if err := c.rn.Campaign(); err != nil {
		c.log.Warn("early campaign", "err", err)
	}
}
