package member

import (
	"context"
	"time"
)

// Where a member stands, as its host and clients see it: caught up or
// not (Ready), in contact with the cell or not (Ready, and whether it
// serves clients: client_serve_guard.go). Removal is raftnode's: a
// removed member's Raft side stops with errs.Removed, and Err, Done and
// Ready report it.

// contactGrace is how long, in election timeouts, a member may go
// without contact with the leader (raftnode's LastContact) before it
// counts as cut off: longer than a change of leader keeps a healthy
// member without one (a new leader is elected within two election
// timeouts of the old one's last heartbeat, under a randomized timeout
// below two), so a failover cuts nobody off.
const contactGrace = 2

// outOfContact returns how long the member has been out of contact with
// the leader, past contactGrace election timeouts; 0 while it is not,
// and before its first contact since Open: a cell electing its first
// leader is not cut off, however long that takes on a busy host, and a
// member that never reached a leader knows none (Ready says so).
func (n *Node) outOfContact() time.Duration {
	last := n.raft.LastContact()
	if last.IsZero() {
		return 0
	}
	gap := time.Since(last)
	if gap <= contactGrace*n.electionTimeout() {
		return 0
	}
	return gap
}

// catchUp marks the member caught up once a read barrier completes: it
// got the leader's commit index (a read index) and applied it. Until
// then Ready waits, so that a member that joined or restarted behind the
// cell is not ready while it replays the log or installs a snapshot
// (when a write it made would end errs.Ambiguous, the snapshot replacing
// its state under it). It tries each election timeout or so until it
// succeeds or the member closes.
func (n *Node) catchUp() {
	et := n.electionTimeout()
	for n.closing.Err() == nil {
		ctx, cancel := context.WithTimeout(n.closing, 4*et)
		err := n.raft.ReadBarrier(ctx)
		cancel()
		if err == nil {
			n.caughtUp.Store(true)
			return
		}
		select {
		case <-n.closing.Done():
		case <-time.After(et / 2):
		}
	}
}
