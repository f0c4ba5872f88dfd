package coord_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestMutexKeyAndIsOwner: Key names the hold's key (its create revision is
// the token); a write guarded by IsOwner happens while the hold lasts and
// not after it was lost; an unheld Mutex has no key and an IsOwner that
// never holds.
func TestMutexKeyAndIsOwner(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	s := newSession(t, ctx, c.Node(0), 2*time.Second)
	m := coord.NewMutex(s, "owner")
	require.Empty(t, m.Key())
	res, err := c.Node(0).Txn(ctx).If(m.IsOwner()).Then(coord.OpPut("guarded", []byte("0"))).Commit()
	require.NoError(t, err)
	require.False(t, res.Succeeded, "an unheld Mutex owns nothing")

	tok, err := m.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, lockKey(t, ctx, c.Node(1), "owner", tok), m.Key())
	kv, err := c.Node(1).Get(ctx, m.Key())
	require.NoError(t, err)
	require.Equal(t, int64(tok), kv.CreateRev)
	require.Equal(t, s.ID(), kv.Session)

	owner := m.IsOwner()
	res, err = c.Node(1).Txn(ctx).If(owner).Then(coord.OpPut("guarded", []byte("1"))).Commit()
	require.NoError(t, err)
	require.True(t, res.Succeeded, "the holder's guarded write happens")

	// Someone deletes the holder's key: the hold is lost and the guard,
	// built while it held, now fails.
	_, err = c.Node(2).Delete(ctx, m.Key())
	require.NoError(t, err)
	recv(t, ctx, m.Done())
	res, err = c.Node(1).Txn(ctx).If(owner).Then(coord.OpPut("guarded", []byte("2"))).Commit()
	require.NoError(t, err)
	require.False(t, res.Succeeded, "a lost hold's guarded write does not happen")
	got, err := c.Node(0).Get(ctx, "guarded")
	require.NoError(t, err)
	require.Equal(t, "1", string(got.Value))
	require.ErrorIs(t, m.Unlock(ctx), coord.ErrNotHeld)
	require.Empty(t, m.Key())
}

// TestMutexLockDeadlineIsErrTimeout: Lock whose deadline runs out while
// the lock is held fails with ErrTimeout and the context's error, as
// Acquire does; a cancelled Lock is not a timeout.
func TestMutexLockDeadlineIsErrTimeout(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	holder := coord.NewMutex(newSession(t, ctx, c.Node(0), 2*time.Second), "deadline")
	_, err := holder.Lock(ctx)
	require.NoError(t, err)

	waiter := coord.NewMutex(newSession(t, ctx, c.Node(1), 2*time.Second), "deadline")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = waiter.Lock(short)
	cancel()
	require.ErrorIs(t, err, coord.ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = waiter.Lock(cctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, coord.ErrTimeout)

	// The timed-out waiter left the queue: only the holder is in it.
	kvs, _, err := c.Node(2).List(ctx, "locks/deadline/")
	require.NoError(t, err)
	require.Len(t, kvs, 1)
	require.Equal(t, holder.Key(), kvs[0].Key)
	require.NoError(t, holder.Unlock(ctx))
}

// TestLockerExcludes: Lockers on one name, on sessions of different
// members, never run their critical sections at once.
func TestLockerExcludes(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	const workers, rounds = 3, 5
	var (
		inside, most, total int
		mu                  sync.Mutex
		wg                  sync.WaitGroup
	)
	for i := range workers {
		l := coord.NewLocker(newSession(t, ctx, c.Node(i), 5*time.Second), "locker")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l.Lock()
				mu.Lock()
				inside++
				most = max(most, inside)
				total++
				mu.Unlock()
				// Give another worker a chance to get in, if exclusion
				// were broken.
				_, _ = c.Node(i).Get(ctx, "locker-probe")
				mu.Lock()
				inside--
				mu.Unlock()
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, most, "one holder at a time")
	require.Equal(t, workers*rounds, total)
	kvs, _, err := c.Node(0).List(ctx, "locks/locker/")
	require.NoError(t, err)
	require.Empty(t, kvs, "every Unlock released its key")
}

// TestLockerPanicsWhenHoldingIsImpossible: Lock on a closed session or an
// empty name panics with an error wrapping the reason; Unlock of a lost
// hold does neither panic nor block.
func TestLockerPanicsWhenHoldingIsImpossible(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	lockErr := func(l sync.Locker) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err, _ = r.(error)
				if err == nil {
					t.Fatalf("panic value %v is not an error", r)
				}
			}
		}()
		l.Lock()
		return nil
	}
	s := newSession(t, ctx, c.Node(0), 2*time.Second)
	require.ErrorIs(t, lockErr(coord.NewLocker(s, "")), coord.ErrInvalidKey)

	l := coord.NewLocker(s, "gone")
	require.NoError(t, lockErr(l))
	require.NoError(t, s.Close(ctx))
	l.Unlock() // the session's end released it already
	err := lockErr(l)
	require.ErrorIs(t, err, coord.ErrSessionClosed)
}

// TestElectionKeyAndRev: while leading, Key is the leader's key and Rev
// its create revision (the token); both are zero after Resign.
func TestElectionKeyAndRev(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	e := coord.NewElection(newSession(t, ctx, c.Node(0), 2*time.Second), "keyrev")
	require.Empty(t, e.Key())
	require.Zero(t, e.Rev())
	tok, err := e.Campaign(ctx, "v")
	require.NoError(t, err)
	l, err := coord.ElectionLeader(ctx, c.Node(1), "keyrev")
	require.NoError(t, err)
	require.Equal(t, l.Key, e.Key())
	require.Equal(t, int64(tok), e.Rev())
	require.Equal(t, int64(l.Token), e.Rev())
	require.NoError(t, e.Resign(ctx))
	require.Empty(t, e.Key())
	require.Zero(t, e.Rev())
}
