package coord

import (
	"context"
	"fmt"

	"github.com/coordcell/coord/internal/lockq"
)

// newLockQueue checks name and returns its queue for s.
func newLockQueue(s *Session, name string) *queue {
	q := newQueue(s, lockq.LockPrefix(name), true)
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
	q    *queue
	name string
	// value is what this Mutex's queue keys hold: the lock-delay, if any.
	value []byte
}

// NewMutex returns the lock name for session s, not yet held. The lock
// lives under the keys locks/{name}/; an empty name is refused by Lock.
// Options (WithLockDelay) apply to this Mutex's acquisitions; a bad one
// is refused by Lock and TryLock.
func NewMutex(s *Session, name string, opts ...MutexOption) *Mutex {
	m := &Mutex{q: newLockQueue(s, name), name: name}
	var o mutexOptions
	for _, f := range opts {
		f(&o)
	}
	if o.delaySet {
		if o.delay <= 0 || o.delay > MaxLockDelay {
			if m.q.err == nil {
				m.q.err = fmt.Errorf("%w: lock-delay %v is outside (0, %v]", ErrInvalidArgument, o.delay, MaxLockDelay)
			}
		} else {
			m.value = lockq.DelayValue(o.delay)
		}
	}
	return m
}

// Lock waits until this Mutex holds the lock, and returns the hold's
// fencing token. It returns only with a hold the cell confirmed while
// the session was alive.
//
// If ctx ends while waiting, Lock leaves the queue and returns an error
// wrapping ctx.Err(); when ctx's deadline ran out, the error also wraps
// ErrTimeout, as Acquire's does, so a caller can tell "waited too long"
// from "was cancelled". If the session ends while waiting, Lock returns
// at once with the session's error (ErrSessionExpired, ErrSessionClosed
// or ErrClosed). While the cell is unreachable Lock keeps trying until
// one of those.
func (m *Mutex) Lock(ctx context.Context) (Token, error) {
	t, err := m.lock(ctx)
	if err != nil {
		return 0, timeoutErr(ctx, m.name, err)
	}
	return t, nil
}

// lock is Lock without the ErrTimeout wrapping, for callers that wrap
// the error themselves (Acquire).
func (m *Mutex) lock(ctx context.Context) (Token, error) {
	return m.q.acquire(ctx, lockq.KindMutex, m.value, false)
}

// TryLock takes the lock if nobody holds or waits for it, and otherwise
// returns an error wrapping ErrLocked without waiting (having left the
// queue again). It also fails with ErrLocked while this Mutex already
// holds or is acquiring.
func (m *Mutex) TryLock(ctx context.Context) (Token, error) {
	return m.q.acquire(ctx, lockq.KindMutex, m.value, true)
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
	return m.q.release(ctx, lockq.KindMutex, ErrNotHeld)
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

// Key returns the key of the current hold (under locks/{name}/, owned by
// the session), from Lock's return until Unlock; "" when this Mutex does
// not hold the lock. Its create revision is the hold's Token.
func (m *Mutex) Key() string { return m.q.key() }

// IsOwner returns a comparison, for Txn's If, that holds while this
// Mutex's current hold is still the lock's: its key exists with create
// revision equal to the hold's token. Guarding a write with it makes the
// write and the ownership check one atomic step in the cell, so a holder
// whose session expired (or whose key was deleted) cannot write:
//
//	res, err := c.Txn(ctx).If(m.IsOwner()).Then(coord.OpPut(k, v)).Commit()
//	// !res.Succeeded: the lock is no longer ours; nothing was written.
//
// The comparison is built when IsOwner is called: call it after Lock.
// When this Mutex holds nothing it returns a comparison that is never
// true. Like the fencing token, it is a check by the cell; a resource
// outside the cell checks the token instead (Fence, CheckToken).
func (m *Mutex) IsOwner() Cmp { return m.q.isOwner() }
