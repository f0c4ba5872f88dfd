package coord

// Resuming a session by ID (etcd's WithLease): a process that restarted,
// or that orphaned a session, takes it over while the cell still has it.

import (
	"context"
	"fmt"

	"github.com/coordcell/coord/internal/spi"
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

// resumeSession adopts the live session o.resume through c: its backend
// says whether it may (a member: a session of its own, owner "", alive
// after a read barrier; a client: one of its identity, whose TTL its
// member tells), and its keeper takes it over.
func resumeSession(ctx context.Context, c Cell, o sessionOptions) (*Session, error) {
	id := o.resume
	if id < 0 {
		return nil, fmt.Errorf("%w: session ID %d", ErrInvalidArgument, int64(id))
	}
	b := c.cell()
	ttl, rev, err := b.b.Resumable(ctx, int64(id))
	if err != nil {
		return nil, err
	}
	k := b.keeper()
	s := &Session{c: c, b: b, k: k, id: id, live: spi.NewResumed(int64(id), ttl, k, b.b.Stats()),
		resumed: true, adopted: make(map[string]bool)}
	// The earlier holder numbered its keys from 1; start far above
	// anything it (or an earlier resume, at a lower revision) could
	// have reached, so a new key never has an old key's name.
	s.keySeq.Store(uint64(rev) << 20)
	if !k.Adopt(s.live) {
		return nil, fmt.Errorf("%w: session %d is already kept alive by this process", ErrInvalidArgument, int64(id))
	}
	// Wait for one confirmed keep-alive, so that it is handed out healthy.
	if _, err := k.Renew(ctx, s.live); err != nil {
		// Not resumed: stop keeping it alive here, but end nothing in the
		// cell (an ended session's error is already ErrSessionExpired).
		s.live.SetConfirming(false)
		s.live.End(ErrSessionClosed)
		return nil, fmt.Errorf("resuming session %d: %w", int64(id), err)
	}
	s.live.SetConfirming(false)
	return s, nil
}
