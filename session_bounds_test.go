package coord_test

import (
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestSessionTTLAboveMaximumIsRefused: a session (or a lease) may not ask
// for more than the member's maximum TTL, on a member or through a
// client; the refusal is ErrInvalidTTL and creates nothing.
func TestSessionTTLAboveMaximumIsRefused(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 1)
	ctx := ctxT(t, 20*time.Second)
	n := c.Node(0)
	before := n.Status().LastIndex
	const tooLong = 1000 * time.Hour
	_, err := n.NewSession(ctx, coord.WithTTL(tooLong))
	require.ErrorIs(t, err, coord.ErrInvalidTTL)
	_, err = n.Acquire(ctx, "lease", tooLong)
	require.ErrorIs(t, err, coord.ErrInvalidTTL)
	cl := connect(t, c)
	_, err = cl.NewSession(ctx, coord.WithTTL(tooLong))
	require.ErrorIs(t, err, coord.ErrInvalidTTL, "a client's session is checked by its member")
	require.Equal(t, before, n.Status().LastIndex, "a refused session writes nothing")

	// An hour is the default maximum, and is accepted.
	s, err := n.NewSession(ctx, coord.WithTTL(time.Hour))
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
}

// TestSessionsCountAgainstQuota: each session's record counts against
// QuotaBytes, like a key: once sessions fill the quota, a creation (and a
// put) fails with ErrQuotaExceeded and changes nothing; ending sessions
// gives the room back.
func TestSessionsCountAgainstQuota(t *testing.T) {
	t.Parallel()
	const quota = 2 << 10
	c := coordtest.NewCluster(t, 1, coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		cfg.QuotaBytes = quota
	}))
	ctx := ctxT(t, 60*time.Second)
	n := c.Node(0)
	var held []*coord.Session
	var err error
	for len(held) < quota { // a session costs at least a byte
		var s *coord.Session
		if s, err = n.NewSession(ctx, coord.WithTTL(time.Minute)); err != nil {
			break
		}
		held = append(held, s)
	}
	require.ErrorIs(t, err, coord.ErrQuotaExceeded, "after %d sessions", len(held))
	t.Logf("%d sessions fill a quota of %d bytes", len(held), quota)
	require.Less(t, len(held), quota/8, "a session costs at least its record's bytes")
	_, err = n.Put(ctx, "k", make([]byte, 64))
	require.ErrorIs(t, err, coord.ErrQuotaExceeded, "sessions' bytes count for puts too")

	for _, s := range held[:4] {
		require.NoError(t, s.Close(ctx))
	}
	_, err = n.Put(ctx, "k", make([]byte, 16))
	require.NoError(t, err, "ended sessions give their bytes back")
	s, err := n.NewSession(ctx, coord.WithTTL(time.Minute))
	require.NoError(t, err)
	held = append(held[4:], s)
	for _, s := range held {
		require.NoError(t, s.Close(ctx))
	}
}

// TestAbandonedSessionsWriteNoLog: a leader holding sessions that nobody
// keeps alive any more does not write their unheard time into the log
// every interval. Once it has found them silent (one write for all of
// them), the log stays still for many intervals (here 20 half election
// timeouts), though the sessions live on until their TTL.
func TestAbandonedSessionsWriteNoLog(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	ctx := ctxT(t, 60*time.Second)
	n := c.Node(0)
	c.Leader()
	et := 20 * 10 * time.Millisecond // coordtest's election timeout
	const count = 200
	ttl := 40 * et
	var ids []coord.SessionID
	for range count {
		s, err := n.NewSession(ctx, coord.WithTTL(ttl))
		require.NoError(t, err)
		ids = append(ids, s.ID())
		s.Orphan()
	}
	// Found silent: a live holder's member calls every TTL/4, so the
	// leader takes them for silent a little after that, and writes it.
	require.Eventually(t, func() bool {
		unheard := coord.SessionsUnheard(n)
		for _, id := range ids {
			if unheard[id] <= 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "the leader never recorded the orphaned sessions as silent")
	before := n.Status()
	end := time.Now().Add(20 * et / 2)
	for time.Now().Before(end) {
		require.Equal(t, before.LastIndex, n.Status().LastIndex,
			"the leader wrote to the log while holding %d abandoned sessions", count)
		select {
		case <-time.After(et / 4): // sampling the log over the window
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	after := n.Status()
	require.Equal(t, before.Term, after.Term)
	unheard := coord.SessionsUnheard(n)
	for _, id := range ids {
		_, live := unheard[id]
		require.True(t, live, "session %d still lives: its TTL has not passed", id)
	}
}
