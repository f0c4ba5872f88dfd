package coord

import (
	"context"
	"fmt"

	"github.com/coordcell/coord/internal/lockq"
)

// Semaphore is a fair, cell-wide counting semaphore: at most n holders at
// once, granted in arrival order (FIFO). A holder holds one of the n
// places until Release or until its hold is lost (session ended, key
// deleted). A waiter watches only the n entries right ahead of it: one of
// them leaving is the only thing that can let it in.
//
// Every hold carries a token (its entry's create revision), strictly
// greater than every earlier grant's; up to n holders hold together, so a
// Fence guarding one resource does not fit a semaphore with n > 1.
//
// A Semaphore is one acquisition at a time: Acquire while it holds (or
// acquires) blocks until Release. Give each concurrent user its own
// Semaphore (they may share a session). Its methods are safe for
// concurrent use.
type Semaphore struct {
	q *queue
	n int
}

// NewSemaphore returns the semaphore name with n places for session s,
// not yet held. It lives under locks/{name}/. Every user of one name
// should pass the same n: each holder's n is stored with its entry and
// decides whether that entry holds. An n below 1 is refused by Acquire
// with ErrInvalidArgument.
func NewSemaphore(s *Session, name string, n int) *Semaphore {
	q := newLockQueue(s, name)
	if n < 1 && q.err == nil {
		q.err = fmt.Errorf("%w: semaphore %q with %d places", ErrInvalidArgument, name, n)
	}
	return &Semaphore{q: q, n: n}
}

// Acquire waits until this Semaphore holds one of the places and returns
// the hold's token. Context, session and unreachable-cell behaviour are
// as for Mutex.Lock.
func (sm *Semaphore) Acquire(ctx context.Context) (Token, error) {
	t, err := sm.q.acquire(ctx, lockq.KindSlot, lockq.SlotValue(sm.n), false)
	if err != nil {
		return 0, timeoutErr(ctx, sm.q.prefix, err)
	}
	return t, nil
}

// Release gives the place up, as Mutex.Unlock does; ErrNotHeld if this
// Semaphore holds none.
func (sm *Semaphore) Release(ctx context.Context) error {
	return sm.q.release(ctx, lockq.KindSlot, ErrNotHeld)
}

// Token returns the current hold's token, 0 when none.
func (sm *Semaphore) Token() Token { return sm.q.token() }

// Done returns a channel closed when the current hold ends for any
// reason, as Mutex.Done; a closed channel when there is no hold.
func (sm *Semaphore) Done() <-chan struct{} { return sm.q.done() }
