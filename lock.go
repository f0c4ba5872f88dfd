package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// lockPrefix is the queue of lock name: locks/{name}/.
func lockPrefix(name string) string { return "locks/" + name + "/" }

// newLockQueue checks name and returns its queue for s.
func newLockQueue(s *Session, name string) *queue {
	q := newQueue(s, lockPrefix(name), true)
	if name == "" {
		q.err = fmt.Errorf("%w: empty lock name", ErrInvalidKey)
	}
	return q
}

// Mutex is a fair, fenced, cell-wide mutual exclusion lock held by a
// session. Waiters queue in arrival order (FIFO by the revision at which
// they joined) and each wakes only when the one ahead of it leaves, so a
// release costs one wake-up however many wait. Every hold carries a
// fencing token, strictly greater than any earlier grant's in the cell.
//
// A Mutex is one acquisition at a time, like sync.Mutex: Lock while this
// Mutex holds (or while another Lock on it waits) blocks until Unlock,
// and TryLock then fails with ErrLocked. Its methods are safe for
// concurrent use by multiple goroutines. Two Mutexes, even on one session
// and one name, are two acquisitions: they exclude each other.
//
// A hold ends with Unlock, or when it is lost: the session ends (expired
// or closed) or someone deletes its key. Done says when; the holder must
// still call Unlock (which then returns ErrNotHeld) before this Mutex
// can be locked again, as with sync.Mutex.
type Mutex struct {
	q *queue
}

// NewMutex returns the lock name for session s, not yet held. The lock
// lives under the keys locks/{name}/; an empty name is refused by Lock.
func NewMutex(s *Session, name string) *Mutex {
	return &Mutex{q: newLockQueue(s, name)}
}

// Lock waits until this Mutex holds the lock, and returns the hold's
// fencing token. It returns only with a hold the cell confirmed while
// the session was alive.
//
// If ctx ends while waiting, Lock leaves the queue and returns ctx.Err().
// If the session ends while waiting, Lock returns at once with the
// session's error (ErrSessionExpired, ErrSessionClosed or ErrClosed).
// While the cell is unreachable Lock keeps trying until one of those.
func (m *Mutex) Lock(ctx context.Context) (Token, error) {
	return m.q.acquire(ctx, kindMutex, nil, false)
}

// TryLock takes the lock if nobody holds or waits for it, and otherwise
// returns an error wrapping ErrLocked without waiting (having left the
// queue again). It also fails with ErrLocked while this Mutex already
// holds or is acquiring.
func (m *Mutex) TryLock(ctx context.Context) (Token, error) {
	return m.q.acquire(ctx, kindMutex, nil, true)
}

// Unlock releases the hold. The delete is guarded by the hold's token
// (its key's create revision), so a retried or delayed Unlock can never
// release a newer hold, even one by the same session. While the cell is
// unreachable Unlock keeps trying, until ctx ends.
//
// Unlock always frees this Mutex for the next Lock. It returns nil once
// the release is confirmed; an error wrapping ErrNotHeld when this Mutex
// held nothing, or its hold had already been lost; and otherwise (ctx
// ended first, the node closed) the error, having left the release to go
// on in the background until it succeeds or the session ends: the lock
// may stay held in the cell until then.
func (m *Mutex) Unlock(ctx context.Context) error {
	return m.q.release(ctx, kindMutex, ErrNotHeld)
}

// Token returns the fencing token of the current hold, from Lock's
// return until Unlock; 0 when this Mutex does not hold the lock. A lost
// hold keeps its token until Unlock: check Done.
func (m *Mutex) Token() Token { return m.q.token() }

// Done returns a channel that is closed when the current hold ends for
// any reason: Unlock, the session's expiry or Close, or the key deleted
// by anyone. It is never sent on, only closed, by this package. When this
// Mutex does not hold the lock it returns a closed channel.
func (m *Mutex) Done() <-chan struct{} { return m.q.done() }

// Lease is a lease-style lock from Acquire: a hold on a lock with a
// session of its own, kept alive only by Renew. If the holder stops
// renewing (crashes, pauses, is cut off), the lease ends by itself one
// TTL after the last renewal and the lock passes on.
//
// Token and Until are set by Acquire and Renew. A Lease is meant for one
// goroutine: Renew updates Until, which must not be read concurrently.
type Lease struct {
	// Token is the lease's fencing token.
	Token Token
	// Until is the holder's conservative deadline: the lease certainly
	// lasts until then, and only Renew extends it. Stop acting on the
	// lease before Until (and fence what it guards with Token).
	Until time.Time

	name string
	s    *Session
	m    *Mutex
}

// Acquire waits for the lock name and returns it as a Lease of the given
// TTL (at least MinSessionTTL). The lease is held by a session of its
// own, which Acquire keeps alive while it waits; once Acquire returns,
// only Renew does.
//
// ctx's deadline bounds the wait: when it runs out first, Acquire returns
// an error wrapping both ErrTimeout and context.DeadlineExceeded. Leases
// and Mutexes on the same name exclude each other.
func (n *Node) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	s, err := n.newSession(ctx, sessionOptions{ttl: ttl, manual: true})
	if err != nil {
		return nil, timeoutErr(ctx, name, err)
	}
	m := NewMutex(s, name)
	token, err := m.lockRenewing(ctx, s)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*n.electionTimeout())
		_ = s.Close(cctx) // if it fails, the session expires by itself
		cancel()
		return nil, timeoutErr(ctx, name, err)
	}
	return &Lease{Token: token, Until: s.Until(), name: name, s: s, m: m}, nil
}

// lockRenewing is Lock on a manual session that it renews while waiting.
func (m *Mutex) lockRenewing(ctx context.Context, s *Session) (Token, error) {
	rctx, cancel := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(s.TTL() / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_, _ = s.n.sessions.renew(rctx, s)
			case <-rctx.Done():
				return
			}
		}
	}()
	token, err := m.Lock(ctx)
	cancel()
	<-renewed
	return token, err
}

func timeoutErr(ctx context.Context, name string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: lock %q not acquired before the deadline: %w", ErrTimeout, name, err)
		}
		return fmt.Errorf("%w: lock %q not acquired before the deadline: %w (%w)", ErrTimeout, name, context.DeadlineExceeded, err)
	}
	return err
}

// Renew extends the lease: it confirms a keep-alive with the cell, then
// checks (linearizably) that the lock is still this lease's. It returns
// the new Until, also stored in l.Until. It fails with the session's
// error (ErrSessionExpired) once the lease has expired, and with
// ErrNotHeld if the lock's key was deleted.
func (l *Lease) Renew(ctx context.Context) (time.Time, error) {
	until, err := l.s.n.sessions.renew(ctx, l.s)
	if err != nil {
		return time.Time{}, err
	}
	if err := l.s.n.CheckToken(ctx, l.name, l.Token); err != nil {
		if errors.Is(err, ErrStaleToken) {
			return time.Time{}, fmt.Errorf("%w: lease on %q: %w", ErrNotHeld, l.name, err)
		}
		return time.Time{}, err
	}
	l.Until = until
	return until, nil
}

// Release gives the lock up and ends the lease's session. It returns
// ErrNotHeld if the lease had already ended (expired, or its key was
// deleted).
func (l *Lease) Release(ctx context.Context) error {
	uerr := l.m.Unlock(ctx)
	cerr := l.s.Close(ctx)
	switch {
	case uerr == nil || errors.Is(uerr, ErrNotHeld):
		return uerr
	case cerr == nil:
		// Closing the session deleted the key even though Unlock failed.
		return nil
	}
	return uerr
}

// Done returns a channel that is closed when the lease ends: released,
// expired, or its key deleted. It is only ever closed.
func (l *Lease) Done() <-chan struct{} { return l.m.Done() }

// CheckToken reports, linearizably, whether t is a current holder's token
// of lock name: nil if it is, else an error wrapping ErrStaleToken. It is
// Chubby's CheckSequencer, for a resource that can ask the cell rather
// than keep a Fence. For a Mutex or a Lease the one holder is the entry
// with the lowest create revision under locks/{name}/; for an RWMutex or
// a Semaphore every current holder's token passes. A t <= 0 gives
// ErrInvalidToken.
func (n *Node) CheckToken(ctx context.Context, name string, t Token) error {
	if t <= 0 {
		return fmt.Errorf("%w: %d is not positive", ErrInvalidToken, int64(t))
	}
	if name == "" {
		return fmt.Errorf("%w: empty lock name", ErrInvalidKey)
	}
	prefix := lockPrefix(name)
	kvs, rev, err := n.List(ctx, prefix)
	if err != nil {
		return err
	}
	hs := holders(parseQueue(prefix, true, kvs))
	for _, h := range hs {
		if Token(h.kv.CreateRev) == t {
			return nil
		}
	}
	var cur []string
	for _, h := range hs {
		cur = append(cur, Token(h.kv.CreateRev).String())
	}
	holder := "none"
	if len(cur) > 0 {
		holder = strings.Join(cur, ", ")
	}
	return fmt.Errorf("%w: token %d does not hold lock %q at revision %d (holders: %s)",
		ErrStaleToken, int64(t), name, rev, holder)
}
