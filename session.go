package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/command"
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
//   - once its holder is gone, the session ends within about
//     2×TTL + 4×et, however often leadership changes (as long as leaders
//     hold office for a few election timeouts at a time).
//
// A change of leader never expires a session whose member stays up and
// connected, when the TTL is at least MinSessionTTL: keep-alives go out
// every TTL/4, a new leader is elected within two election timeouts of
// the old one's last heartbeat, and it answers the first keep-alive one
// heartbeat round after its election's no-op commits.
//
// A Session is safe for concurrent use.
type Session struct {
	c      Cell    // the way in that made it
	b      backend // c's backend
	k      keeper  // b's keep-alive engine
	id     SessionID
	ttl    time.Duration
	manual bool // kept alive only by renew (leases)
	// stats are the member's session counters; nil for a client's.
	stats *sessionCounters

	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	err       error     // why it ended; nil while alive
	until     time.Time // conservative local deadline (monotonic)
	lastSent  time.Time // when its last keep-alive left this member
	lastAcked time.Time // the send time of the last confirmed keep-alive
	inJeopard bool
	jeopardy  chan struct{} // closed while in jeopardy
	healthy   chan struct{} // closed while healthy
	acked     chan struct{} // closed (and replaced) at each confirmed keep-alive
	closing   bool
	orphaned  bool // ended locally by Orphan, perhaps alive in the cell
	// confirming is set while NewSession confirms a session whose
	// creation took long: nobody holds it yet, so its deadline, which
	// may already have passed, is not acted on until the confirmation.
	confirming bool

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
func (n *Node) MinSessionTTL() time.Duration { return minSessionTTL(n) }

func minSessionTTL(b backend) time.Duration { return 4 * b.electionTimeout() }

// checkSessionTTL refuses a TTL below min or above max (0 = no maximum).
func checkSessionTTL(ttl, min, max time.Duration) error {
	switch {
	case ttl < min:
		return fmt.Errorf("%w: %v is below the minimum %v (four election timeouts)", ErrInvalidTTL, ttl, min)
	case max > 0 && ttl > max:
		return fmt.Errorf("%w: %v is above the maximum %v (Config.MaxSessionTTL)", ErrInvalidTTL, ttl, max)
	}
	return nil
}

// checkSessionTTL refuses, and counts, a TTL this member does not accept.
func (n *Node) checkSessionTTL(ttl time.Duration) error {
	err := checkSessionTTL(ttl, n.MinSessionTTL(), n.cfg.MaxSessionTTL)
	if err != nil {
		n.sessionStats.refusedTTL.Add(1)
	}
	return err
}

// NewSession creates a session in the cell (one log entry) and keeps it
// alive from this member until Close, Orphan, or expiry. Its TTL (WithTTL)
// is at least MinSessionTTL; the cell never ends it earlier than TTL
// after the send of its last confirmed keep-alive (see Session). With
// WithSessionID it creates nothing: it adopts a live session instead.
func (n *Node) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: DefaultSessionTTL}
	for _, f := range opts {
		f(&o)
	}
	return newSession(ctx, n, o)
}

// newSession creates a session through c, kept alive by c's keeper.
func newSession(ctx context.Context, c Cell, o sessionOptions) (*Session, error) {
	if o.resume != 0 {
		return resumeSession(ctx, c, o)
	}
	b := c.cellBackend()
	k := b.keeper()
	// A client does not know its member's maximum (0 here): the member
	// checks it.
	if err := checkSessionTTL(o.ttl, minSessionTTL(b), b.limits().maxSessionTTL); err != nil {
		sessionCountersOf(b).count(func(c *sessionCounters) *atomic.Uint64 { return &c.refusedTTL })
		return nil, err
	}
	sent := time.Now()
	res, err := b.propose(ctx, &command.Command{Kind: command.KindSessionCreate,
		Session: &command.Session{TTL: int64(o.ttl)}})
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, b: b, k: k, id: SessionID(res.SessionID), ttl: o.ttl, manual: o.manual,
		stats:    sessionCountersOf(b),
		jeopardy: make(chan struct{}), healthy: make(chan struct{}), acked: make(chan struct{})}
	s.stats.count(func(c *sessionCounters) *atomic.Uint64 { return &c.created })
	close(s.healthy)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// The creation committed after sent, and every leader grants a new
	// session a full TTL from its creation or election.
	s.until = sent.Add(o.ttl - k.margin(o.ttl))
	s.lastSent, s.lastAcked = sent, sent
	// A creation that took long (a loaded machine, a change of leader)
	// leaves the holder's deadline near or past: the cell granted the TTL
	// from when its leader applied the creation, later than sent, but the
	// holder cannot know how much later. Confirm the session with one
	// keep-alive before handing it out, so that it starts healthy rather
	// than expiring at its first check.
	slow := time.Since(sent) > o.ttl/4
	s.confirming = slow
	k.add(s)
	if slow {
		if _, err := k.renew(ctx, s); err != nil {
			s.mu.Lock()
			s.confirming = false
			s.mu.Unlock()
			// Nobody will hold it: end it in the cell rather than leave it
			// to expire.
			k.proposeAsync(&command.Command{Kind: command.KindSessionEnd,
				Session: &command.Session{ID: int64(s.id)}})
			s.end(ErrSessionClosed)
			return nil, fmt.Errorf("session %d created but not confirmed, so ended: %w", s.id, err)
		}
		s.mu.Lock()
		s.confirming = false
		s.mu.Unlock()
	}
	return s, nil
}

// ID returns the session's ID, unique in the cell forever.
func (s *Session) ID() SessionID { return s.id }

// TTL returns the session's time to live.
func (s *Session) TTL() time.Duration { return s.ttl }

// Node returns the member the session lives on: the Node it was made
// with. It is nil for a session made through a Cell that is not a
// member (a client); Cell works for both.
func (s *Session) Node() *Node {
	n, _ := s.b.(*Node)
	return n
}

// Cell returns the Cell the session was made with, and through which its
// recipes reach the cell.
func (s *Session) Cell() Cell { return s.c }

// Done is closed when the session has ended: expired, closed, or its
// member closed. Err then says which.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Ctx returns a context cancelled when the session ends: pass it to work
// that must stop when the session (and so every lock it holds) is gone.
func (s *Session) Ctx() context.Context { return s.ctx }

// Err returns nil while the session lives, then ErrSessionExpired,
// ErrSessionClosed or ErrClosed.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Until returns the holder's conservative deadline: the session certainly
// lives in the cell until then (unless closed). It moves forward with each
// confirmed keep-alive.
func (s *Session) Until() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until
}

// Jeopardy returns a channel that is closed while the session is in
// jeopardy: keep-alives are not being confirmed, so the cell may expire it
// soon. Side effects that depend on the session should pause. A new
// channel is returned once the session is healthy again.
func (s *Session) Jeopardy() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jeopardy
}

// Healthy returns a channel that is closed while the session is healthy
// (keep-alives confirmed). A new channel is returned once it enters
// jeopardy; it is never closed after the session ended.
func (s *Session) Healthy() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthy
}

// Close ends the session in the cell: one committed change deletes all
// its ephemeral keys (and so releases its locks). Close is idempotent.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.err != nil && !s.orphaned {
		err := s.err
		s.mu.Unlock()
		if err == ErrSessionClosed {
			return nil
		}
		return err
	}
	s.closing = true
	s.mu.Unlock()
	_, err := s.b.propose(ctx, &command.Command{Kind: command.KindSessionEnd,
		Session: &command.Session{ID: int64(s.id)}})
	if err != nil {
		if !errors.Is(err, ErrAmbiguous) {
			// It certainly did not end; if it did end after all, the
			// end arrives as an expiry and is reported as a close.
			s.mu.Lock()
			s.closing = false
			s.mu.Unlock()
		}
		return err
	}
	s.mu.Lock()
	s.orphaned = false
	s.mu.Unlock()
	s.end(ErrSessionClosed)
	return nil
}

// Orphan stops keeping the session alive without ending it: the cell
// expires it after its TTL, so its locks pass on only then. Locally it
// ends at once (ErrSessionClosed). Close after Orphan still ends it in the
// cell.
func (s *Session) Orphan() {
	s.k.remove(s.id)
	s.mu.Lock()
	s.orphaned = s.err == nil
	s.mu.Unlock()
	s.end(ErrSessionClosed)
}

// end records why the session ended and releases everything waiting on
// it. It returns the reason recorded, or nil if the session had already
// ended.
func (s *Session) end(err error) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	if s.closing && err == ErrSessionExpired {
		err = ErrSessionClosed
	}
	s.err = err
	if err == ErrSessionExpired {
		s.stats.count(func(c *sessionCounters) *atomic.Uint64 { return &c.expired })
	}
	if !s.inJeopard {
		s.healthy = make(chan struct{}) // never closed: it will not be healthy again
		if err == ErrSessionExpired {
			// However the holder learns of an expiry (its own deadline,
			// or the cell's word after a pause), jeopardy is closed no
			// later than Done, so code that waits on Jeopardy stops.
			s.inJeopard = true
			close(s.jeopardy)
		}
	}
	s.mu.Unlock()
	s.k.remove(s.id)
	s.cancel()
	return err
}

// confirmed records a keep-alive sent at sent and confirmed by the leader.
func (s *Session) confirmed(sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if u := sent.Add(s.ttl - s.k.margin(s.ttl)); u.After(s.until) {
		s.until = u
	}
	if sent.After(s.lastAcked) {
		s.lastAcked = sent
	}
	close(s.acked)
	s.acked = make(chan struct{})
	if s.inJeopard && time.Now().Before(s.until) {
		s.inJeopard = false
		close(s.healthy)
		s.jeopardy = make(chan struct{})
	}
}

// unconfirmed reports whether its last keep-alive is still unanswered.
func (s *Session) unconfirmed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastAcked.Before(s.lastSent)
}

func (s *Session) ackChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// check updates jeopardy and local expiry at now; it returns true if the
// session expired locally.
func (s *Session) check(now time.Time) bool {
	s.mu.Lock()
	if s.err != nil || s.confirming {
		s.mu.Unlock()
		return false
	}
	expired := !now.Before(s.until)
	// Jeopardy: nothing confirmed for half a TTL, so keep-alives in a row
	// went unanswered (they go out every quarter TTL, or faster).
	if !s.inJeopard && (expired || now.Sub(s.lastAcked) > s.ttl/2) {
		s.inJeopard = true
		s.stats.count(func(c *sessionCounters) *atomic.Uint64 { return &c.jeopardy })
		close(s.jeopardy)
		s.healthy = make(chan struct{})
	}
	s.mu.Unlock()
	if expired {
		s.end(ErrSessionExpired)
	}
	return expired
}
