package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

// Lock-delay: the recipe's option. The sessions leader times the markers
// (internal/sessions) that the state machine writes (storage).

// MaxLockDelay is the longest lock-delay WithLockDelay accepts.
const MaxLockDelay = lockq.MaxLockDelay

// MutexOption configures NewMutex (and NewLocker).
type MutexOption func(*mutexOptions)

type mutexOptions struct {
	delay    time.Duration
	delaySet bool
}

// WithLockDelay asks for a lock-delay of d (Chubby's, Consul's
// lock-delay): when the session of a hold taken by this Mutex expires
// (the cell decided it had ended: not Close, not Unlock), nobody is
// granted the lock for d afterwards, so writes the lost holder still
// had in flight land before the next holder's. It is for resources that
// cannot check a fencing token; one that can should (Fence), which needs
// no wait.
//
// The delay is written in the hold's key, and at the expiry the cell puts
// a marker under the lock's queue (locks/{name}/d…) that every waiter,
// older or newer, treats as a holder; the sessions leader deletes it d
// after it saw it applied. A change of leader restarts the delay from the
// new leader's election, so it is never shorter than d and may be up to
// d plus a few election timeouts longer. The marker is part of the
// replicated state: it survives restarts and snapshots. Deleting it by
// hand ends the delay at once.
//
// The delay follows any expiry: one decided by the cell's leader, and one
// that the holder's own member proposes when its local deadline passed
// first.
//
// d must be in (0, MaxLockDelay]; otherwise Lock and TryLock fail with
// ErrInvalidArgument. Only Mutex (and NewLocker) take it; a delay left by
// a Mutex also holds off RWMutex and Semaphore acquisitions of the same
// name. An expiry that leaves a delay is written in a command format that
// members of earlier builds refuse (they stop applying until upgraded,
// rather than disagree), so upgrade every member before relying on it.
func WithLockDelay(d time.Duration) MutexOption {
	return func(o *mutexOptions) { o.delay, o.delaySet = d, true }
}

// NewLocker returns the lock name for session s as a sync.Locker, for
// code written against sync.Locker (sync.Cond, libraries taking a
// Locker). It is a Mutex without contexts and without errors, so it
// must decide what to do with the errors a Mutex would return:
//
//   - Lock never returns without the lock: returning would let two
//     holders run at once. It waits as long as it takes, and rides out
//     what can pass: an unreachable cell (as Mutex.Lock does), its
//     waiting key deleted by someone else, any other failure that may
//     not last (it queues again after a short backoff).
//   - Lock panics when holding has become impossible: the session has
//     ended (ErrSessionExpired, ErrSessionClosed), the member has closed
//     (ErrClosed), or the name is invalid (ErrInvalidKey,
//     ErrKeyTooLarge). The panic
//     value is an error wrapping that sentinel. etcd's NewLocker panics
//     on any error; this one only on these, where the alternative is to
//     block forever with a goroutine and a dead session nobody hears
//     of. Use it only where the session's end should end the work, and
//     use Mutex wherever the caller can handle an error.
//   - Unlock never panics and never blocks for long: it releases the
//     hold, and if the cell cannot confirm the release at once it goes
//     on releasing in the background, until it succeeds or the session
//     ends (as Mutex.Unlock does when its ctx ends). A hold already lost
//     (the session ended, the key deleted) needs no release.
//
// A Locker gives no fencing token: a holder whose session expires keeps
// running its critical section unaware. Where that matters use Mutex,
// fence with its Token, and watch its Done, or, for a resource that
// cannot check a token, pass WithLockDelay (opts are NewMutex's). Like
// sync.Mutex, Lock while held waits for Unlock, and it is safe for
// concurrent use.
func NewLocker(s *Session, name string, opts ...MutexOption) sync.Locker {
	return &locker{m: NewMutex(s, name, opts...)}
}

type locker struct {
	m *Mutex
}

// Lock implements sync.Locker; see NewLocker.
func (l *locker) Lock() {
	s := l.m.q.s
	for {
		_, err := l.m.lock(context.Background())
		if err == nil {
			return
		}
		if s.Err() != nil || errors.Is(err, ErrClosed) || l.m.q.err != nil ||
			errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrKeyTooLarge) {
			panic(fmt.Errorf("coord: Locker %q cannot be held: %w", l.m.name, err))
		}
		// Anything else may pass (our waiting key deleted by someone
		// else, a quota full for now): queue again after one backoff. If
		// the session ends meanwhile, the next attempt says so.
		_ = backoff(s.Ctx(), s.b, s)
	}
}

// unlockWait bounds how long Unlock waits for the cell to confirm the
// release before leaving it to the background, in election timeouts.
const unlockWait = 2

// Unlock implements sync.Locker; see NewLocker.
func (l *locker) Unlock() {
	s := l.m.q.s
	ctx, cancel := context.WithTimeout(s.Ctx(), unlockWait*s.b.electionTimeout())
	defer cancel()
	// Every outcome is acceptable here: released, already lost, or left
	// to the background release, which ends with the session at worst.
	_ = l.m.Unlock(ctx)
}

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
