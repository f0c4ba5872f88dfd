package coord_test

import (
	"testing"
	"testing/synctest"
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
// them), it writes only the session clock, each time its tenure has
// doubled (internal/sessions Table.Tick): over 100 half election timeouts
// the log grows by a handful of entries, in proportion to the log of the
// tenure, not to the intervals or the sessions, and the sessions live on
// until their TTL.
func TestAbandonedSessionsWriteNoLog(t *testing.T) {
	t.Parallel()
	// In virtual time: the window is many intervals long, and on the wall
	// clock a busy machine stretched it past the TTL (seed
	// 6565942640987468808 saw sessions end inside it beside CPU burners).
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 1)
		ctx := ctxT(t, 10*time.Minute)
		n := c.Node(0)
		c.Leader()
		elected := time.Now()
		et := 20 * 10 * time.Millisecond // coordtest's election timeout
		const count = 200
		window := 100 * et / 2
		ttl := 4*window + 40*et
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
		}, ttl, 10*time.Millisecond, "the leader never recorded the orphaned sessions as silent")
		before := n.Status()
		// The tenure the session clock counts is the leader's time less an
		// election timeout; it is written when that has doubled.
		from := max(time.Since(elected)-et, et/2) // none is written below et/2
		time.Sleep(window)
		to := time.Since(elected) - et
		after := n.Status()
		require.Equal(t, before.Term, after.Term)
		doublings := uint64(0)
		for d := from; d < to; d *= 2 {
			doublings++
		}
		t.Logf("%d entries in %v (tenure %v to %v: %d doublings)", after.LastIndex-before.LastIndex, window, from, to, doublings)
		require.LessOrEqual(t, after.LastIndex-before.LastIndex, doublings,
			"the leader wrote %d entries in %v while holding %d abandoned sessions (tenure %v to %v)",
			after.LastIndex-before.LastIndex, window, count, from, to)
		unheard := coord.SessionsUnheard(n)
		for _, id := range ids {
			_, live := unheard[id]
			require.True(t, live, "session %d ended: its TTL has not passed", id)
		}
	})
}
