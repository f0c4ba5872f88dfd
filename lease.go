package coord

// Leases (Acquire) and the cell-side check of a lock's fencing token
// (CheckToken): a lock held by a session of its own, renewed by hand.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coordcell/coord/internal/lockq"
)

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
func (c *cellOps) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	return acquireLease(ctx, c.self, name, ttl)
}

// acquireLease is Acquire through any Cell.
func acquireLease(ctx context.Context, c Cell, name string, ttl time.Duration) (*Lease, error) {
	s, err := newSession(ctx, c, sessionOptions{ttl: ttl, manual: true})
	if err != nil {
		return nil, timeoutErr(ctx, name, err)
	}
	m := NewMutex(s, name)
	token, err := m.lockRenewing(ctx, s)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.b.electionTimeout())
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
				_, _ = s.k.Renew(rctx, s.live)
			case <-rctx.Done():
				return
			}
		}
	}()
	token, err := m.lock(ctx)
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
	until, err := l.s.k.Renew(ctx, l.s.live)
	if err != nil {
		return time.Time{}, err
	}
	if err := checkToken(ctx, l.s.b, l.name, l.Token); err != nil {
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
func (c *cellOps) CheckToken(ctx context.Context, name string, t Token) error {
	return checkToken(ctx, c, name, t)
}

// checkToken is CheckToken through any backend.
func checkToken(ctx context.Context, b *cellOps, name string, t Token) error {
	if t <= 0 {
		return fmt.Errorf("%w: %d is not positive", ErrInvalidToken, int64(t))
	}
	if name == "" {
		return fmt.Errorf("%w: empty lock name", ErrInvalidKey)
	}
	prefix := lockq.LockPrefix(name)
	kvs, rev, err := listPrefix(ctx, b, prefix, nil)
	if err != nil {
		return err
	}
	hs := lockq.Holders(parseQueue(prefix, true, kvs))
	for _, h := range hs {
		if Token(h.Rev) == t {
			return nil
		}
	}
	var cur []string
	for _, h := range hs {
		cur = append(cur, Token(h.Rev).String())
	}
	holder := "none"
	if len(cur) > 0 {
		holder = strings.Join(cur, ", ")
	}
	return fmt.Errorf("%w: token %d does not hold lock %q at revision %d (holders: %s)",
		ErrStaleToken, int64(t), name, rev, holder)
}
