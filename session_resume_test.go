package coord_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestResumeAfterRestart: the holder's member crashes and comes back;
// the new process resumes the session by ID, and a Mutex on it takes
// over the hold it had, with the same token and no second queue entry.
func TestResumeAfterRestart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		h := (c.LeaderIndex() + 1) % 3
		const ttl = 50 * electionTimeout
		s := newSession(t, ctx, c.Node(h), ttl)
		id := s.ID()
		t1, err := coord.NewMutex(s, "resumed").Lock(ctx)
		require.NoError(t, err)

		c.Crash(h)
		c.Restart(h)
		n := c.Node(h)
		s2, err := n.NewSession(ctx, coord.WithSessionID(id))
		require.NoError(t, err)
		require.Equal(t, id, s2.ID())
		require.Equal(t, ttl, s2.TTL(), "the session keeps its own TTL")
		require.NoError(t, s2.Err())

		m := coord.NewMutex(s2, "resumed")
		t2, err := m.TryLock(ctx)
		require.NoError(t, err, "the hold is taken over, not queued behind")
		require.Equal(t, t1, t2, "same fencing token")
		require.NoError(t, n.CheckToken(ctx, "resumed", t2))
		kvs, _, err := n.List(ctx, "locks/resumed/")
		require.NoError(t, err)
		require.Len(t, kvs, 1, "no second queue entry")

		// The resumed session is kept alive from here: it is confirmed again.
		until := s2.Until()
		require.Eventually(t, func() bool { return s2.Until().After(until) }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, m.Unlock(ctx))

		// Another member takes the lock at once.
		other := newSession(t, ctx, c.Node((h+1)%3), 10*electionTimeout)
		_, err = coord.NewMutex(other, "resumed").TryLock(ctx)
		require.NoError(t, err)
		require.NoError(t, s2.Close(ctx))
	})
}

// TestResumeAfterOrphan: in one process, a session orphaned is resumed;
// its hold is taken over once, and a second Mutex on it queues.
func TestResumeAfterOrphan(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 30*time.Second)
		n := c.Node(c.LeaderIndex())
		s := newSession(t, ctx, n, 20*electionTimeout)
		t1, err := coord.NewMutex(s, "orphan").Lock(ctx)
		require.NoError(t, err)
		lt1, err := coord.NewElection(s, "orphan").Campaign(ctx, "v1")
		require.NoError(t, err)
		s.Orphan()

		s2, err := n.NewSession(ctx, coord.WithSessionID(s.ID()))
		require.NoError(t, err)
		_, err = n.NewSession(ctx, coord.WithSessionID(s.ID()))
		require.ErrorIs(t, err, coord.ErrInvalidArgument, "kept alive here already")

		t2, err := coord.NewMutex(s2, "orphan").Lock(ctx)
		require.NoError(t, err)
		require.Equal(t, t1, t2)
		_, err = coord.NewMutex(s2, "orphan").TryLock(ctx)
		require.ErrorIs(t, err, coord.ErrLocked, "the old hold is taken over once")
		won, lt2, err := coord.NewElection(s2, "orphan").TryCampaign(ctx, "v2")
		require.NoError(t, err)
		require.True(t, won, "the leadership is taken over")
		require.Equal(t, lt1, lt2)

		// New keys of the resumed session never take an old key's name.
		t3, err := coord.NewMutex(s2, "orphan-2").Lock(ctx)
		require.NoError(t, err)
		require.Greater(t, t3, t2)
		require.NoError(t, s2.Close(ctx))
	})
}

// TestResumeRefused: an ID the cell does not have (never created, closed,
// expired) is refused with ErrSessionExpired, and nothing changes.
func TestResumeRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 30*time.Second)
		leader := c.LeaderIndex()
		n := c.Node(leader)

		closed := newSession(t, ctx, n, 10*electionTimeout)
		require.NoError(t, closed.Close(ctx))
		cut := (leader + 1) % 3
		expired := newSession(t, ctx, c.Node(cut), 4*electionTimeout)
		_, err := c.Node(cut).Put(ctx, "resume/eph", nil, coord.Ephemeral(expired))
		require.NoError(t, err)
		c.Isolate(cut)
		// Wait until the cell, not only the holder, has ended it: its key is
		// gone. (Resuming before that would keep it alive.)
		require.Eventually(t, func() bool {
			_, err := n.Get(ctx, "resume/eph")
			return errors.Is(err, coord.ErrNotFound)
		}, 30*time.Second, 10*time.Millisecond)
		c.Heal()

		rev := n.Status().Revision
		for _, id := range []coord.SessionID{closed.ID(), expired.ID(), 1 << 40} {
			_, err := n.NewSession(ctx, coord.WithSessionID(id))
			require.ErrorIs(t, err, coord.ErrSessionExpired, id)
		}
		require.Equal(t, rev, n.Status().Revision, "nothing changed")
		_, err = n.NewSession(ctx, coord.WithSessionID(-1))
		require.ErrorIs(t, err, coord.ErrInvalidArgument)
	})
}

// TestResumeOnClientAfterRestart: a client process "restarts" (its
// session orphaned, the client closed, a new client of the same identity
// connected) and resumes the session holding a Mutex: same token, one
// queue entry, and the session is kept alive from the new client.
func TestResumeOnClientAfterRestart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithClients())
		ctx := ctxT(t, 60*time.Second)
		var name string
		cl1, err := c.Connect(ctx, func(cfg *coord.ClientConfig) { name = cfg.Name })
		require.NoError(t, err)
		const ttl = 20 * electionTimeout
		s, err := cl1.NewSession(ctx, coord.WithTTL(ttl))
		require.NoError(t, err)
		id := s.ID()
		t1, err := coord.NewMutex(s, "client-resumed").Lock(ctx)
		require.NoError(t, err)
		s.Orphan()
		require.NoError(t, cl1.Close())

		cl2, err := c.Connect(ctx, func(cfg *coord.ClientConfig) { cfg.Name = name })
		require.NoError(t, err)
		s2, err := cl2.NewSession(ctx, coord.WithSessionID(id))
		require.NoError(t, err)
		require.Equal(t, id, s2.ID())
		require.Equal(t, ttl, s2.TTL(), "the session keeps its own TTL, told by the member")
		require.NoError(t, s2.Err())
		_, err = cl2.NewSession(ctx, coord.WithSessionID(id))
		require.ErrorIs(t, err, coord.ErrInvalidArgument, "kept alive by this client already")

		m := coord.NewMutex(s2, "client-resumed")
		t2, err := m.TryLock(ctx)
		require.NoError(t, err, "the hold is taken over, not queued behind")
		require.Equal(t, t1, t2, "same fencing token")
		n := c.Node(c.LeaderIndex())
		require.NoError(t, n.CheckToken(ctx, "client-resumed", t2))
		kvs, _, err := n.List(ctx, "locks/client-resumed/")
		require.NoError(t, err)
		require.Len(t, kvs, 1, "no second queue entry")

		// Kept alive from the new client: confirmed again, well past the TTL.
		until := s2.Until()
		require.Eventually(t, func() bool { return s2.Until().After(until.Add(ttl)) }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, s2.Err())
		require.NoError(t, m.Unlock(ctx))
		require.NoError(t, s2.Close(ctx))
	})
}

// TestResumeOnClientRefused: a client cannot adopt another client's
// session nor a member's (ErrForbidden), nor one the cell does not have
// (ErrSessionExpired); nothing changes in the cell, and the sessions
// refused keep being kept alive by their holders.
func TestResumeOnClientRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithClients())
		ctx := ctxT(t, 60*time.Second)
		n := c.Node(c.LeaderIndex())
		alice, err := c.Connect(ctx)
		require.NoError(t, err)
		bob, err := c.Connect(ctx)
		require.NoError(t, err)
		const ttl = 20 * electionTimeout
		theirs, err := alice.NewSession(ctx, coord.WithTTL(ttl))
		require.NoError(t, err)
		_, err = coord.NewMutex(theirs, "refused").Lock(ctx)
		require.NoError(t, err)
		members := newSession(t, ctx, n, ttl)
		closed, err := bob.NewSession(ctx, coord.WithTTL(ttl))
		require.NoError(t, err)
		require.NoError(t, closed.Close(ctx))

		rev := n.Status().Revision
		for _, id := range []coord.SessionID{theirs.ID(), members.ID()} {
			_, err := bob.NewSession(ctx, coord.WithSessionID(id))
			require.ErrorIs(t, err, coord.ErrForbidden, id)
		}
		for _, id := range []coord.SessionID{closed.ID(), 1 << 40} {
			_, err := bob.NewSession(ctx, coord.WithSessionID(id))
			require.ErrorIs(t, err, coord.ErrSessionExpired, id)
		}
		_, err = bob.NewSession(ctx, coord.WithSessionID(-1))
		require.ErrorIs(t, err, coord.ErrInvalidArgument)
		require.Equal(t, rev, n.Status().Revision, "nothing changed")

		// Their holders still have them.
		for _, s := range []*coord.Session{theirs, members} {
			require.NoError(t, s.Err())
			left, err := s.TimeToLive(ctx)
			require.NoError(t, err)
			require.Positive(t, left)
		}
		kvs, _, err := n.List(ctx, "locks/refused/")
		require.NoError(t, err)
		require.Len(t, kvs, 1)
		require.Equal(t, theirs.ID(), kvs[0].Session)
	})
}
