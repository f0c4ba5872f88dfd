package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

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
