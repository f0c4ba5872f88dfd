package spi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/errs"
)

// Session is a session's liveness as its holder sees it: its local
// deadline (Until), jeopardy and its end. The root's Session is built on
// one; a Keeper confirms it with keep-alives and checks it each tick.
// Its methods are safe for concurrent use.
type Session struct {
	id     int64
	ttl    time.Duration
	manual bool // kept alive only by Renew (leases)
	k      Keeper
	stats  *SessionStats // nil: not counted (a client's)

	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	err       error     // why it ended; nil while alive
	until     time.Time // conservative local deadline (monotonic)
	lastSent  time.Time // when its last keep-alive left this process
	lastAcked time.Time // the send time of the last confirmed keep-alive
	inJeopard bool
	jeopardy  chan struct{} // closed while in jeopardy
	healthy   chan struct{} // closed while healthy
	acked     chan struct{} // closed (and replaced) at each confirmed keep-alive
	closing   bool
	orphaned  bool // ended locally by Orphan, perhaps alive in the cell
	// confirming is set while a creation that took long, or a resume, is
	// confirmed: nobody holds the session yet, so its deadline, which may
	// already have passed, is not acted on until the confirmation.
	confirming bool
}

// NewSession returns the liveness of session id of ttl, kept alive by k
// (manual: only by Renew), healthy, with its deadline ttl less k's
// margin after sent. confirming holds off local expiry until
// SetConfirming(false).
func NewSession(id int64, ttl time.Duration, manual bool, k Keeper, stats *SessionStats, sent time.Time, confirming bool) *Session {
	s := &Session{id: id, ttl: ttl, manual: manual, k: k, stats: stats, confirming: confirming,
		jeopardy: make(chan struct{}), healthy: make(chan struct{}), acked: make(chan struct{})}
	close(s.healthy)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.until = sent.Add(ttl - k.Margin(ttl))
	s.lastSent, s.lastAcked = sent, sent
	return s
}

// NewResumed returns the liveness of a session adopted by ID: its
// deadline stays at now until the first confirmation, since nothing is
// known before that of the deadline the cell gives it.
func NewResumed(id int64, ttl time.Duration, k Keeper, stats *SessionStats) *Session {
	now := time.Now()
	s := NewSession(id, ttl, false, k, stats, now, true)
	s.until = now
	return s
}

// ID is the session's ID.
func (s *Session) ID() int64 { return s.id }

// TTL is the session's time to live.
func (s *Session) TTL() time.Duration { return s.ttl }

// Manual reports whether the session is kept alive only by Renew.
func (s *Session) Manual() bool { return s.manual }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Ctx is cancelled when the session ends.
func (s *Session) Ctx() context.Context { return s.ctx }

// Err is nil while the session lives, then why it ended.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Until is the holder's conservative deadline.
func (s *Session) Until() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until
}

// Jeopardy is closed while the session is in jeopardy.
func (s *Session) Jeopardy() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jeopardy
}

// Healthy is closed while the session is healthy.
func (s *Session) Healthy() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthy
}

// LastAcked is the send time of the last confirmed keep-alive.
func (s *Session) LastAcked() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastAcked
}

// SetConfirming holds off (or, false, allows) acting on the deadline.
func (s *Session) SetConfirming(on bool) {
	s.mu.Lock()
	s.confirming = on
	s.mu.Unlock()
}

// StartClose marks the session as closing by its holder, so that an end
// the cell reports meanwhile is a close; it returns the session's error
// (and false) when it has already ended other than by Orphan, which
// Close then answers.
func (s *Session) StartClose() (error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil && !s.orphaned {
		return s.err, false
	}
	s.closing = true
	return nil, true
}

// CloseFailed undoes StartClose after a close that certainly did not
// happen.
func (s *Session) CloseFailed() {
	s.mu.Lock()
	s.closing = false
	s.mu.Unlock()
}

// Closed records the holder's close, applied in the cell.
func (s *Session) Closed() {
	s.mu.Lock()
	s.orphaned = false
	s.mu.Unlock()
	s.End(errs.SessionClosed)
}

// Orphan stops keeping the session alive and ends it locally, leaving it
// to expire in the cell.
func (s *Session) Orphan() {
	s.k.Remove(s.id)
	s.mu.Lock()
	s.orphaned = s.err == nil
	s.mu.Unlock()
	s.End(errs.SessionClosed)
}

// End records why the session ended and releases everything waiting on
// it. It returns the reason recorded, or nil if the session had already
// ended.
func (s *Session) End(err error) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	if s.closing && err == errs.SessionExpired {
		err = errs.SessionClosed
	}
	s.err = err
	if err == errs.SessionExpired {
		s.stats.Count(func(c *SessionStats) *atomic.Uint64 { return &c.Expired })
	}
	if !s.inJeopard {
		s.healthy = make(chan struct{}) // never closed: it will not be healthy again
		if err == errs.SessionExpired {
			// However the holder learns of an expiry (its own deadline,
			// or the cell's word after a pause), jeopardy is closed no
			// later than Done, so code that waits on Jeopardy stops.
			s.inJeopard = true
			close(s.jeopardy)
		}
	}
	s.mu.Unlock()
	s.k.Remove(s.id)
	s.cancel()
	return err
}

// Confirmed records a keep-alive sent at sent and confirmed by the leader.
func (s *Session) Confirmed(sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if u := sent.Add(s.ttl - s.k.Margin(s.ttl)); u.After(s.until) {
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

// MarkSent records a keep-alive for the session leaving at now.
func (s *Session) MarkSent(now time.Time) {
	s.mu.Lock()
	s.lastSent = now
	s.mu.Unlock()
}

// Unconfirmed reports whether its last keep-alive is still unanswered.
func (s *Session) Unconfirmed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastAcked.Before(s.lastSent)
}

// AckChan is closed at the next confirmed keep-alive.
func (s *Session) AckChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Check updates jeopardy and local expiry at now; it returns true if the
// session expired locally.
func (s *Session) Check(now time.Time) bool {
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
		s.stats.Count(func(c *SessionStats) *atomic.Uint64 { return &c.Jeopardy })
		close(s.jeopardy)
		s.healthy = make(chan struct{})
	}
	s.mu.Unlock()
	if expired {
		s.End(errs.SessionExpired)
	}
	return expired
}

// NextCheck is when Check can next act on the session (jeopardy, then
// expiry), as things stand: a confirmed keep-alive only moves it later.
// ok is false while a confirmation holds off the deadline: its end may
// come at any time.
func (s *Session) NextCheck() (at time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.confirming {
		return time.Time{}, false
	}
	if s.inJeopard || s.err != nil {
		return s.until, true
	}
	// Check's jeopardy is strictly after half a TTL of silence.
	return minTime(s.until, s.lastAcked.Add(s.ttl/2+1)), true
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// SessionStats counts session events on a member: Created counts the
// sessions created through it (its own and its clients', as a client
// has no metrics), Expired and Jeopardy its own sessions' local events,
// Decided the expiries it decided, and the Refused ones the creations it
// refused or saw refused: a TTL out of bounds, a client identity at its
// session bound, the quota.
type SessionStats struct {
	Created  atomic.Uint64
	Expired  atomic.Uint64
	Jeopardy atomic.Uint64
	Decided  atomic.Uint64

	RefusedTTL, RefusedLimit, RefusedQuota atomic.Uint64
}

// Count adds one to the counter pick chooses, if there are counters.
func (c *SessionStats) Count(pick func(*SessionStats) *atomic.Uint64) {
	if c != nil {
		pick(c).Add(1)
	}
}
