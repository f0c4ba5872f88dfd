package coord_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// The cell's time left for a live session lies in (0, TTL] and is
// refreshed by keep-alives; once the holder stops (Orphan) it only runs
// down, until the cell ends the session and TimeToLive says so.
func TestTimeToLiveRefreshedThenRunsDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		li := c.LeaderIndex()
		for _, i := range []int{li, (li + 1) % 3} { // asked of the leader, and through a follower
			n := c.Node(i)
			ttl := 2 * n.MinSessionTTL()
			s, err := n.NewSession(ctx, coord.WithTTL(ttl))
			require.NoError(t, err)
			requireRefreshed(ctx, t, s)

			s.Orphan()
			// A keep-alive sent just before Orphan may still land: start
			// from a reading after the deadline was seen to fall.
			var prev time.Duration
			base, err := s.TimeToLive(ctx)
			require.NoError(t, err, "orphaned, but alive in the cell")
			require.Eventually(t, func() bool {
				prev, err = s.TimeToLive(ctx)
				require.NoError(t, err)
				return prev < base
			}, 20*time.Second, 10*time.Millisecond)
			for {
				left, err := s.TimeToLive(ctx)
				if err != nil {
					require.ErrorIs(t, err, coord.ErrSessionExpired)
					break
				}
				require.LessOrEqual(t, left, prev, "nobody keeps it alive: it only runs down")
				prev = left
				select {
				case <-ctx.Done():
					t.Fatal("the orphaned session did not expire")
				case <-time.After(n.MinSessionTTL() / 8):
				}
			}
		}
	})
}

// requireRefreshed checks that s's time left stays in (0, TTL] and that
// keep-alives lift it: keep-alives go out every TTL/4, so between two of
// them it runs down below 7/8 of the TTL, and the next one lifts it
// again. (Compared with the first reading instead, the test would need a
// keep-alive to land within the read's own latency of the creation.)
func requireRefreshed(ctx context.Context, t *testing.T, s *coord.Session) {
	t.Helper()
	read := func() time.Duration {
		left, err := s.TimeToLive(ctx)
		require.NoError(t, err)
		require.Positive(t, left)
		require.LessOrEqual(t, left, s.TTL())
		return left
	}
	// A pause between readings, so that time passes in a synctest bubble
	// too, where a leader's answer costs none.
	var low time.Duration
	for low = read(); low > s.TTL()*7/8; low = read() {
		require.NoError(t, ctx.Err(), "the time left never ran down")
		time.Sleep(time.Millisecond)
	}
	for read() <= low {
		require.NoError(t, ctx.Err(), "no keep-alive refreshed the deadline")
		time.Sleep(time.Millisecond)
	}
}

// A closed session is ended in the cell: ErrSessionExpired.
func TestTimeToLiveClosedSession(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	n := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := n.NewSession(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	_, err = s.TimeToLive(ctx)
	require.ErrorIs(t, err, coord.ErrSessionExpired)
}

// After the leader crashes, the new leader's answer is never shorter than
// the old leader's less the time that passed: it grants a live session
// a full TTL from its election.
func TestTimeToLiveAcrossLeaderChange(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	li := c.LeaderIndex()
	n := c.Node((li + 1) % 3)
	s, err := n.NewSession(ctx, coord.WithTTL(2*n.MinSessionTTL()))
	require.NoError(t, err)
	asked := time.Now()
	before, err := s.TimeToLive(ctx)
	require.NoError(t, err)
	c.Crash(li)
	after, err := s.TimeToLive(ctx)
	require.NoError(t, err)
	elapsed := time.Since(asked)
	require.NotEqual(t, c.Name(li), n.Status().Leader, "answered by a new leader")
	require.GreaterOrEqual(t, after, before-elapsed, "before %v, after %v, %v apart", before, after, elapsed)
	require.LessOrEqual(t, after, s.TTL())
}

// A client's session reports the cell's time left too, through its
// member, refreshed by the client's keep-alives; once closed, it has
// ended.
func TestTimeToLiveClientSession(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithClients())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := c.Connect(ctx)
	require.NoError(t, err)
	ttl := 2 * cl.MinSessionTTL()
	s, err := cl.NewSession(ctx, coord.WithTTL(ttl))
	require.NoError(t, err)
	requireRefreshed(ctx, t, s)
	require.NoError(t, s.Close(ctx))
	_, err = s.TimeToLive(ctx)
	require.ErrorIs(t, err, coord.ErrSessionExpired)
}
