package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
)

// DefaultSessionTTL is the TTL of a session made without WithTTL.
const DefaultSessionTTL = 10 * time.Second

// DefaultMaxSessionTTL is the longest TTL a member accepts by default
// (Config.MaxSessionTTL): sixty times an etcd client's default lease
// (60 s) and 360 times DefaultSessionTTL.
const DefaultMaxSessionTTL = time.Hour

// Session is a holder's liveness in the cell: ephemeral keys, lock holds
// and leaderships belong to a session and end with it.
//
// The member that created the session keeps it alive: once per TTL/4 it
// sends one batched keep-alive for all its sessions to the leader (never
// a Raft log write), and more often while one goes unanswered. When no keep-alive has been confirmed for a while the
// session is in jeopardy (Jeopardy is closed): the holder should stop side
// effects that depend on it. It becomes healthy again when a keep-alive
// is confirmed, or expires. The holder's view of the deadline (Until) is
// conservative: it passes before the cell can expire the session and hand
// its locks to someone else.
//
// The bounds, with s the send time of the holder's last confirmed
// keep-alive and et the election timeout:
//
//   - the cell never ends the session before s + TTL (on the holder's
//     monotonic clock, give or take 2% of the TTL for clock rates): a
//     leader acknowledges a keep-alive only once it has proved it still
//     led after the keep-alive arrived, every later leader grants at
//     least that, and a deposed leader's expiries are refused;
//   - Until is s + TTL - (et/4 + TTL/50), and Done closes by then (the
//     holder checks each quarter election timeout);
//   - jeopardy begins when nothing was confirmed for TTL/2 after s (at
//     the earliest TTL/2 after s, so at least TTL/2 - et/4 - TTL/50
//     before Until);
//   - once its holder is gone, the session ends within 2×TTL + 6×et,
//     however often leadership changes (as long as leaders hold office
//     for a few election timeouts at a time; under terms of two to four
//     election timeouts, 1,000 seeds ended at most 2×TTL + 5.3×et).
//
// A change of leader never expires a session whose member stays up and
// connected, when the TTL is at least MinSessionTTL: keep-alives go out
// every TTL/4, a new leader is elected within two election timeouts of
// the old one's last heartbeat, and it answers the first keep-alive one
// heartbeat round after its election's no-op commits.
//
// A Session is safe for concurrent use.
type Session struct {
	c  Cell     // the way in that made it
	b  *cellOps // c's
	k  spi.Keeper
	id SessionID
	// live is the session's liveness: its deadline, jeopardy, its end.
	live *spi.Session

	// keySeq numbers the session's queue acquisitions. Session IDs are
	// unique in the cell forever, so session plus sequence names each
	// acquisition uniquely: a key is never reused, and a delayed or
	// retried operation on an old acquisition's key can never touch a
	// newer one.
	keySeq atomic.Uint64
	// resumed is set for a session adopted by ID (WithSessionID): its
	// earlier holder may have left queue keys that its recipes take
	// over. adopted names the keys already taken over, under mu, so two
	// acquisitions never share one.
	resumed bool
	mu      sync.Mutex
	adopted map[string]bool
}

// SessionOption configures NewSession.
type SessionOption func(*sessionOptions)

type sessionOptions struct {
	ttl    time.Duration
	manual bool
	resume SessionID // WithSessionID: adopt this live session
}

// WithTTL sets the session's time to live (default DefaultSessionTTL). It
// must be at least MinSessionTTL, four election timeouts (4s with the
// default timing), and at most the member's Config.MaxSessionTTL (an
// hour by default); NewSession rejects another with ErrInvalidTTL.
// See Session for how early the cell may end a session and how early its
// holder sees jeopardy.
func WithTTL(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.ttl = d }
}

// MinSessionTTL returns the shortest TTL this member accepts: four
// election timeouts, so that a session held on a healthy member outlives
// a change of leader. In the worst case its last confirmed keep-alive
// went out a quarter TTL before the leader failed, its Until is
// 0.98×TTL - et/4 after that send, and the new leader is elected up to
// two election timeouts after the failure: at 4×et that leaves 2/3 of
// an election timeout for the new leader's first answer; at 3×et it
// leaves none. (Measured under load with 10 ms ticks: 0 false expiries
// in 18 leader changes at 3, 3.5 and 4 election timeouts; before
// keep-alives were answered after one read barrier, 16 of 144 sessions
// expired at 3.)
//
// Through a Client it is the cell's minimum, as the member said.
func (c *cellOps) MinSessionTTL() time.Duration { return spi.MinSessionTTL(c.electionTimeout()) }

// NewSession creates a session in the cell (one log entry) and keeps it
// alive from this member until Close, Orphan, or expiry. Its TTL (WithTTL)
// is at least MinSessionTTL; the cell never ends it earlier than TTL
// after the send of its last confirmed keep-alive (see Session). With
// WithSessionID it creates nothing: it adopts a live session instead.
//
// Through a Client the session is kept alive by the client's batched
// keep-alive, and survives the client's move to another member within
// its TTL.
func (c *cellOps) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: DefaultSessionTTL}
	for _, f := range opts {
		f(&o)
	}
	return newSession(ctx, c.self, o)
}

// newSession creates a session through c, kept alive by c's keeper.
func newSession(ctx context.Context, c Cell, o sessionOptions) (*Session, error) {
	if o.resume != 0 {
		return resumeSession(ctx, c, o)
	}
	b := c.cell()
	k := b.keeper()
	// A client does not know its member's maximum (0 here): the member
	// checks it.
	if err := spi.CheckSessionTTL(o.ttl, b.MinSessionTTL(), b.limits().MaxSessionTTL); err != nil {
		b.b.Stats().Count(func(c *spi.SessionStats) *atomic.Uint64 { return &c.RefusedTTL })
		return nil, err
	}
	sent := time.Now()
	res, err := b.propose(ctx, &command.Command{Kind: command.KindSessionCreate,
		Session: &command.Session{TTL: int64(o.ttl)}})
	if err != nil {
		return nil, err
	}
	// A creation that took long (a loaded machine, a change of leader)
	// leaves the holder's deadline near or past: the cell granted the TTL
	// from when its leader applied the creation, later than sent, but the
	// holder cannot know how much later. Confirm the session with one
	// keep-alive before handing it out, so that it starts healthy rather
	// than expiring at its first check.
	slow := time.Since(sent) > o.ttl/4
	stats := b.b.Stats()
	stats.Count(func(c *spi.SessionStats) *atomic.Uint64 { return &c.Created })
	// The creation committed after sent, and every leader grants a new
	// session a full TTL from its creation or election.
	s := &Session{c: c, b: b, k: k, id: SessionID(res.SessionID),
		live: spi.NewSession(res.SessionID, o.ttl, o.manual, k, stats, sent, slow)}
	k.Add(s.live)
	if slow {
		if _, err := k.Renew(ctx, s.live); err != nil {
			s.live.SetConfirming(false)
			// Nobody will hold it: end it in the cell rather than leave it
			// to expire.
			k.ProposeAsync(&command.Command{Kind: command.KindSessionEnd,
				Session: &command.Session{ID: int64(s.id)}})
			s.live.End(ErrSessionClosed)
			return nil, fmt.Errorf("session %d created but not confirmed, so ended: %w", s.id, err)
		}
		s.live.SetConfirming(false)
	}
	return s, nil
}

// ID returns the session's ID, unique in the cell forever.
func (s *Session) ID() SessionID { return s.id }

// TTL returns the session's time to live.
func (s *Session) TTL() time.Duration { return s.live.TTL() }

// Node returns the member the session lives on: the Node it was made
// with. It is nil for a session made through a Cell that is not a
// member (a client); Cell works for both.
func (s *Session) Node() *Node { return s.b.node }

// Cell returns the Cell the session was made with, and through which its
// recipes reach the cell.
func (s *Session) Cell() Cell { return s.c }

// Done is closed when the session has ended: expired, closed, or its
// member closed. Err then says which.
func (s *Session) Done() <-chan struct{} { return s.live.Done() }

// Ctx returns a context cancelled when the session ends: pass it to work
// that must stop when the session (and so every lock it holds) is gone.
func (s *Session) Ctx() context.Context { return s.live.Ctx() }

// Err returns nil while the session lives, then ErrSessionExpired,
// ErrSessionClosed or ErrClosed.
func (s *Session) Err() error { return s.live.Err() }

// Until returns the holder's conservative deadline: the session certainly
// lives in the cell until then (unless closed). It moves forward with each
// confirmed keep-alive.
func (s *Session) Until() time.Time { return s.live.Until() }

// Jeopardy returns a channel that is closed while the session is in
// jeopardy: keep-alives are not being confirmed, so the cell may expire it
// soon. Side effects that depend on the session should pause. A new
// channel is returned once the session is healthy again.
func (s *Session) Jeopardy() <-chan struct{} { return s.live.Jeopardy() }

// Healthy returns a channel that is closed while the session is healthy
// (keep-alives confirmed). A new channel is returned once it enters
// jeopardy; it is never closed after the session ended.
func (s *Session) Healthy() <-chan struct{} { return s.live.Healthy() }

// TimeToLive returns how long the cell would still wait before expiring
// the session if it heard nothing more from its holder: the time left on
// the leader's deadline for it, read from the leader now (etcd's
// Lease.TimeToLive). It is the cell's view, not the holder's: Until is
// the holder's conservative local deadline, earlier by at least its
// margin; TimeToLive is what a keep-alive extends and what a stopped
// holder (Orphan, a crash) runs down. A new leader grants every live
// session a full TTL from its election, so the value never drops across
// a change of leader faster than time passes.
//
// It asks the leader (through this member, or a client's member), waits
// for one that has loaded its table, and confirms that leadership after
// reading it; ctx bounds the wait. A session the cell has ended gives
// an error wrapping ErrSessionExpired, also after Close or Orphan here
// once the cell has ended it: a session orphaned but not yet expired
// still reports its time left. It changes nothing in the cell.
func (s *Session) TimeToLive(ctx context.Context) (time.Duration, error) {
	return s.b.b.TimeToLive(ctx, int64(s.id))
}

// Close ends the session in the cell: one committed change deletes all
// its ephemeral keys (and so releases its locks). Close is idempotent.
func (s *Session) Close(ctx context.Context) error {
	if err, ok := s.live.StartClose(); !ok {
		if err == ErrSessionClosed {
			return nil
		}
		return err
	}
	_, err := s.b.propose(ctx, &command.Command{Kind: command.KindSessionEnd,
		Session: &command.Session{ID: int64(s.id)}})
	if err != nil {
		if !errors.Is(err, ErrAmbiguous) {
			// It certainly did not end; if it did end after all, the
			// end arrives as an expiry and is reported as a close.
			s.live.CloseFailed()
		}
		return err
	}
	s.live.Closed()
	return nil
}

// Orphan stops keeping the session alive without ending it: the cell
// expires it after its TTL, so its locks pass on only then. Locally it
// ends at once (ErrSessionClosed). Close after Orphan still ends it in the
// cell.
func (s *Session) Orphan() { s.live.Orphan() }

// Resuming a session by ID (etcd's WithLease): a process that restarted,
// or that orphaned a session, takes it over while the cell still has it.

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
