package coord

// Resuming a session by ID (etcd's WithLease): a process that restarted,
// or that orphaned a session, takes it over while the cell still has it.

import (
	"context"
	"fmt"
	"time"
)

// WithSessionID makes NewSession adopt the live session id instead of
// creating one: after the process that held it restarted, or after
// Orphan. The session is kept alive from this member from now on and
// keeps its own TTL (WithTTL is ignored). NewSession returns it once a
// keep-alive for it has been confirmed, so it starts healthy.
//
// A session the cell has ended (expired or closed), or never had, gives
// an error wrapping ErrSessionExpired, and nothing changes in the cell.
// A session this process already keeps alive, or (on a member) one
// created by a client (only that client may keep it alive), gives
// ErrInvalidArgument.
//
// Through a Client, only a session created by a client of the same
// identity (ClientConfig.Name, or its certificate's) can be resumed: the
// member tells such a client the session's TTL, along with its time to
// live; another client's session, or a member's, gives ErrForbidden, and
// nothing changes in the cell. This is how a client process that
// restarted takes its sessions back.
//
// The recipes carry on where the earlier holder left off: a Mutex,
// RWMutex or Semaphore acquisition (or an Election's campaign) on the
// resumed session whose session already has a key of the same kind in
// that queue takes that key over rather than queueing again, so a lock
// the session held is held at once, with the same fencing token (as
// etcd's mutex does with a resumed lease). The key keeps its value: a
// campaign taken over keeps the value proclaimed before (Proclaim
// changes it). Each key is taken over by one acquisition; further ones
// queue as usual. This costs one read of the queue per acquisition.
//
// Resuming is safe only if the earlier holder is really gone (or
// orphaned the session): two processes keeping one session alive both
// believe they hold its locks.
func WithSessionID(id SessionID) SessionOption {
	return func(o *sessionOptions) { o.resume = id }
}

// resumeSession adopts the live session o.resume through c.
func resumeSession(ctx context.Context, c Cell, o sessionOptions) (*Session, error) {
	id := o.resume
	if id < 0 {
		return nil, fmt.Errorf("%w: session ID %d", ErrInvalidArgument, int64(id))
	}
	switch b := c.cellBackend().(type) {
	case *Node:
		return resumeOnMember(ctx, c, b, id)
	case *Client:
		return resumeOnClient(ctx, c, b, id)
	}
	return nil, fmt.Errorf("%w: resuming session %d: this cell cannot resume a session by ID", ErrInvalidArgument, int64(id))
}

// resumeOnMember adopts a member's own session (owner "") into n's
// engine. The session's Cell is c, as for a session created through c.
func resumeOnMember(ctx context.Context, c Cell, n *Node, id SessionID) (*Session, error) {
	// A linearizable look: a session the state does not have after the
	// read barrier has ended (IDs are log indexes, never reused).
	if err := n.readBarrier(ctx, readOptions{}); err != nil {
		return nil, err
	}
	info, found, err := n.sm.Session(int64(id))
	if err != nil {
		return nil, n.stateErr(err)
	}
	rev := n.sm.Revision()
	switch {
	case !found:
		return nil, fmt.Errorf("%w: session %d is not alive in the cell", ErrSessionExpired, int64(id))
	case info.Owner != "":
		return nil, fmt.Errorf("%w: session %d belongs to %s: only it may resume it", ErrInvalidArgument, int64(id), info.Owner)
	}
	s := resumed(c, n, n.keeper(), id, time.Duration(info.TTL), rev)
	if !n.sessions.adopt(s) {
		return nil, fmt.Errorf("%w: session %d is already kept alive by this process", ErrInvalidArgument, int64(id))
	}
	return confirmResumed(ctx, s)
}

// resumeOnClient adopts one of cl's own sessions into its keep-alive
// engine. The member checks the owner: it tells the TTL (and so lets the
// resume go on) only for a session of this client's identity, so another
// client's session, or a member's, is ErrForbidden and nothing changes.
func resumeOnClient(ctx context.Context, c Cell, cl *Client, id SessionID) (*Session, error) {
	ttl, err := cl.ka.grantedTTL(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("resuming session %d: %w", int64(id), err)
	}
	// A linearizable read for a revision at least that of every key the
	// earlier holder made (see resumed); the prefix is one no recipe uses,
	// so the read returns next to nothing.
	_, rev, err := cl.list(ctx, resumeRevProbe, readOptions{})
	if err != nil {
		return nil, fmt.Errorf("resuming session %d: %w", int64(id), err)
	}
	s := resumed(c, cl, cl.ka, id, ttl, rev)
	if !cl.ka.adopt(s) {
		return nil, fmt.Errorf("%w: session %d is already kept alive by this client", ErrInvalidArgument, int64(id))
	}
	return confirmResumed(ctx, s)
}

// resumeRevProbe is the prefix a client reads to learn a current
// revision.
const resumeRevProbe = "\x00coord/resume/"

// resumed makes the Session that adopts id, not yet kept alive.
func resumed(c Cell, b backend, k keeper, id SessionID, ttl time.Duration, rev int64) *Session {
	s := &Session{c: c, b: b, k: k, id: id, ttl: ttl, stats: sessionCountersOf(b),
		jeopardy: make(chan struct{}), healthy: make(chan struct{}), acked: make(chan struct{}),
		resumed: true, adopted: make(map[string]bool), confirming: true}
	close(s.healthy)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// Until stays at now until the first confirmation: nothing is known
	// of the deadline the cell gives the session before that.
	now := time.Now()
	s.until, s.lastSent, s.lastAcked = now, now, now
	// The earlier holder numbered its keys from 1; start far above
	// anything it (or an earlier resume, at a lower revision) could
	// have reached, so a new key never has an old key's name.
	s.keySeq.Store(uint64(rev) << 20)
	return s
}

// confirmResumed waits for one confirmed keep-alive of s, already adopted
// by its keeper, so that it is handed out healthy.
func confirmResumed(ctx context.Context, s *Session) (*Session, error) {
	if _, err := s.k.renew(ctx, s); err != nil {
		// Not resumed: stop keeping it alive here, but end nothing in the
		// cell (an ended session's error is already ErrSessionExpired).
		s.mu.Lock()
		s.confirming = false
		s.mu.Unlock()
		s.end(ErrSessionClosed)
		return nil, fmt.Errorf("resuming session %d: %w", int64(s.id), err)
	}
	s.mu.Lock()
	s.confirming = false
	s.mu.Unlock()
	return s, nil
}

// adopt starts keeping s alive, unless a session of its ID is kept here
// already; it reports whether it did.
func (e *sessionEngine) adopt(s *Session) bool {
	e.mu.Lock()
	if _, ok := e.local[s.id]; ok {
		e.mu.Unlock()
		return false
	}
	e.mu.Unlock()
	// Between the look and the add a concurrent adopt of the same ID could
	// slip in; both would then keep one session alive, which is harmless
	// for the cell, and the map keeps one of them.
	e.add(s)
	return true
}
