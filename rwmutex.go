package coord

import (
	"context"

	"github.com/coordcell/coord/internal/lockq"
)

// RWMutex is a fair, fenced, cell-wide readers-writer lock held by a
// session. Readers share it; a writer holds it alone. It is fair in
// arrival order: a reader proceeds when no writer arrived before it, a
// writer when nobody did, so a waiting writer holds back the readers
// that come after it (no writer starvation). Each waiter watches only the
// nearest entry ahead of it that blocks it, and always re-reads the queue
// before it proceeds, so a waiter leaving (its session expiring, say)
// never lets two writers in together.
//
// Every hold carries a fencing token (its entry's create revision). A
// writer's token is greater than that of every hold granted before it; a
// reader's is greater than every earlier writer's, but readers that hold
// together have different tokens, so fence writes with writer tokens.
//
// An RWMutex is one acquisition at a time, read or write: RLock or Lock
// while it holds (or acquires) blocks until RUnlock or Unlock. For many
// concurrent readers in one process, give each its own RWMutex (they
// may share a session). Its methods are safe for concurrent use. A lost
// hold (session ended, key deleted) must still be released, as with
// Mutex.
type RWMutex struct {
	q *queue
}

// NewRWMutex returns the readers-writer lock name for session s, not yet
// held. It lives under locks/{name}/, the same queue as NewMutex(s, name):
// a Mutex there acts as a writer.
func NewRWMutex(s *Session, name string) *RWMutex {
	return &RWMutex{q: newLockQueue(s, name)}
}

// RLock waits until this RWMutex holds the lock for reading and returns
// the hold's token. Context, session and unreachable-cell behaviour are
// as for Mutex.Lock.
func (rw *RWMutex) RLock(ctx context.Context) (Token, error) {
	t, err := rw.q.acquire(ctx, lockq.KindReader, nil, false)
	if err != nil {
		return 0, timeoutErr(ctx, rw.q.prefix, err)
	}
	return t, nil
}

// RUnlock releases a read hold, as Mutex.Unlock does; ErrNotHeld if this
// RWMutex holds no read hold.
func (rw *RWMutex) RUnlock(ctx context.Context) error {
	return rw.q.release(ctx, lockq.KindReader, ErrNotHeld)
}

// Lock waits until this RWMutex holds the lock for writing (alone) and
// returns the hold's token, as Mutex.Lock does.
func (rw *RWMutex) Lock(ctx context.Context) (Token, error) {
	t, err := rw.q.acquire(ctx, lockq.KindWriter, nil, false)
	if err != nil {
		return 0, timeoutErr(ctx, rw.q.prefix, err)
	}
	return t, nil
}

// Unlock releases a write hold, as Mutex.Unlock does; ErrNotHeld if this
// RWMutex holds no write hold.
func (rw *RWMutex) Unlock(ctx context.Context) error {
	return rw.q.release(ctx, lockq.KindWriter, ErrNotHeld)
}

// Token returns the current hold's token (read or write), 0 when none.
func (rw *RWMutex) Token() Token { return rw.q.token() }

// Done returns a channel closed when the current hold ends for any
// reason, as Mutex.Done; a closed channel when there is no hold.
func (rw *RWMutex) Done() <-chan struct{} { return rw.q.done() }
