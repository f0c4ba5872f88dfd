package coord_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// testLockDelay is long against coordtest's election timeout, so a
// grant before it would show.
const testLockDelay = 1500 * time.Millisecond

// waitMarker waits until n's applied state shows a lock-delay marker
// under lock name, and returns its key, its revision and when it was
// first seen (no earlier than the expiry that wrote it).
// expireHolderWithMaxDelay has a member other than the leader take lock
// name with MaxLockDelay, cuts that member off until the cell expires its
// session, and heals it: the lock is left in lock-delay. It returns the
// leader's index and the marker's key and revision.
func expireHolderWithMaxDelay(t *testing.T, ctx context.Context, c *coordtest.Cluster, name string) (leader int, key string, rev int64) {
	t.Helper()
	leader = c.LeaderIndex()
	h := (leader + 1) % c.Size()
	hs := newSession(t, ctx, c.Node(h), 4*electionTimeout)
	_, err := coord.NewMutex(hs, name, coord.WithLockDelay(coord.MaxLockDelay)).Lock(ctx)
	require.NoError(t, err)
	c.Isolate(h)
	key, rev, _ = waitMarker(t, ctx, c.Node(leader), name)
	c.Heal()
	return leader, key, rev
}

func waitMarker(t *testing.T, ctx context.Context, n *coord.Node, name string) (string, int64, time.Time) {
	t.Helper()
	for {
		kvs, _, err := n.List(ctx, "locks/"+name+"/", coord.Serializable())
		require.NoError(t, err)
		for _, kv := range kvs {
			if strings.HasPrefix(kv.Key[len("locks/"+name+"/"):], "d") {
				return kv.Key, kv.CreateRev, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no lock-delay marker under %s: %v", name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// requireNoMarker checks that lock name has no lock-delay marker.
func requireNoMarker(t *testing.T, ctx context.Context, n *coord.Node, name string) {
	t.Helper()
	kvs, _, err := n.List(ctx, "locks/"+name+"/")
	require.NoError(t, err)
	for _, kv := range kvs {
		require.False(t, strings.HasPrefix(kv.Key[len("locks/"+name+"/"):], "d"), "marker %s", kv.Key)
	}
}

// holdThenExpire takes lock name with a lock-delay on member h and cuts
// h off until its session has expired in the cell; a waiter on member w
// is already queued. It returns the waiter's result, the marker's
// revision and when w first saw it.
func holdThenExpire(t *testing.T, ctx context.Context, c *coordtest.Cluster, name string, h, w int) (coord.Token, <-chan tokenResult, int64, time.Time) {
	t.Helper()
	return holdThenFault(t, ctx, c, name, h, w, c.Isolate)
}

// holdThenFault is holdThenExpire with fault as the way h is silenced.
func holdThenFault(t *testing.T, ctx context.Context, c *coordtest.Cluster, name string, h, w int, fault func(int)) (coord.Token, <-chan tokenResult, int64, time.Time) {
	t.Helper()
	probe := coord.ProbeLock(name, members(c)...)
	defer probe.Close()
	hs := newSession(t, ctx, c.Node(h), 4*electionTimeout)
	t1, err := coord.NewMutex(hs, name, coord.WithLockDelay(testLockDelay)).Lock(ctx)
	require.NoError(t, err)
	ws := newSession(t, ctx, c.Node(w), 10*electionTimeout)
	res := async(ctx, coord.NewMutex(ws, name).Lock)
	waitParked(t, ctx, probe, 1)
	fault(h)
	_, rev, seen := waitMarker(t, ctx, c.Node(w), name)
	return t1, res, rev, seen
}

// TestLockDelayAfterExpiry: once a holder's session expires, the lock is
// granted to nobody (Lock waits, TryLock fails) until the delay has
// passed, then to the waiter queued before the expiry.
func TestLockDelayAfterExpiry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		leader := c.LeaderIndex()
		h := (leader + 1) % 3
		t1, res, rev, seen := holdThenExpire(t, ctx, c, "delayed", h, leader)

		other := newSession(t, ctx, c.Node(leader), 10*electionTimeout)
		_, err := coord.NewMutex(other, "delayed").TryLock(ctx)
		require.ErrorIs(t, err, coord.ErrLocked, "TryLock during the delay")

		r := recv(t, ctx, res)
		elapsed := time.Since(seen)
		require.NoError(t, r.err)
		require.Greater(t, r.token, t1)
		require.Less(t, int64(r.token), rev, "the waiter queued before the expiry kept its place")
		// The leader starts the delay once it has applied the expiry, which
		// the waiter's member (here the same one) saw no earlier; the slack
		// is for this test's polling.
		require.GreaterOrEqual(t, elapsed, testLockDelay-electionTimeout, "granted before the delay ended")
		requireNoMarker(t, ctx, c.Node(leader), "delayed")
		c.Heal()
	})
}

// TestLockDelayAfterPause: the holder's member freezes (a long GC pause,
// SIGSTOP) until the cell expires its session; the delay holds, and the
// holder, once resumed, finds its hold gone.
func TestLockDelayAfterPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		leader := c.LeaderIndex()
		h := (leader + 1) % 3
		_, res, rev, seen := holdThenFault(t, ctx, c, "paused", h, leader, c.Pause)
		r := recv(t, ctx, res)
		elapsed := time.Since(seen)
		require.NoError(t, r.err)
		require.Less(t, int64(r.token), rev)
		require.GreaterOrEqual(t, elapsed, testLockDelay-electionTimeout, "granted before the delay ended")
		c.Resume(h)
	})
}

// TestLockDelayNotAfterRelease: Unlock and Close are the holder letting
// go, and leave no delay.
func TestLockDelayNotAfterRelease(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	n := c.Node(c.LeaderIndex())
	s := newSession(t, ctx, n, 10*electionTimeout)
	m := coord.NewMutex(s, "released", coord.WithLockDelay(coord.MaxLockDelay))
	_, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(ctx))
	requireNoMarker(t, ctx, n, "released")
	_, err = m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	requireNoMarker(t, ctx, n, "released")
	s2 := newSession(t, ctx, n, 10*electionTimeout)
	_, err = coord.NewMutex(s2, "released").TryLock(ctx)
	require.NoError(t, err, "granted at once")

	for _, d := range []time.Duration{0, -time.Second, coord.MaxLockDelay + 1} {
		_, err = coord.NewMutex(s2, "bad", coord.WithLockDelay(d)).Lock(ctx)
		require.ErrorIs(t, err, coord.ErrInvalidArgument, d)
	}
}

// TestLockDelayLeaderChange: the leader that timed the delay crashes
// during it; its successor starts the delay again, so the waiter is still
// not granted before the delay has passed.
func TestLockDelayLeaderChange(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		leader := c.LeaderIndex()
		h, w := (leader+1)%3, (leader+2)%3
		_, res, rev, seen := holdThenExpire(t, ctx, c, "failover", h, w)
		c.Heal()
		c.Crash(leader)
		r := recv(t, ctx, res)
		elapsed := time.Since(seen)
		require.NoError(t, r.err)
		require.Less(t, int64(r.token), rev)
		require.GreaterOrEqual(t, elapsed, testLockDelay-electionTimeout, "granted before the delay ended")
		require.NotEqual(t, leader, c.LeaderIndex())
		c.Restart(leader)
	})
}

// TestLockDelaySurvivesRestart: the marker is replicated state: after
// every member restarts it is still there, and the new leader ends it.
func TestLockDelaySurvivesRestart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		_, key, rev := expireHolderWithMaxDelay(t, ctx, c, "restart")
		for i := range 3 {
			c.Crash(i)
		}
		for i := range 3 {
			c.Restart(i)
		}
		n := c.Node(c.LeaderIndex())
		kv, err := n.Get(ctx, key)
		require.NoError(t, err, "the marker survived the restart")
		require.Equal(t, rev, kv.CreateRev)
		s := newSession(t, ctx, n, 10*electionTimeout)
		_, err = coord.NewMutex(s, "restart").TryLock(ctx)
		require.ErrorIs(t, err, coord.ErrLocked)
		// Ending it by hand is allowed (an operator's override).
		_, err = n.Delete(ctx, key)
		require.NoError(t, err)
		_, err = coord.NewMutex(s, "restart").Lock(ctx)
		require.NoError(t, err)
	})
}
