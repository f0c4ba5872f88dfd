package coord_test

import (
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

func TestSessionTTLBelowMinimumIsRefused(t *testing.T) {
	c := coordtest.NewCluster(t, 1)
	ctx := ctxT(t, 5*time.Second)
	n := c.Node(0)
	_, err := n.NewSession(ctx, coord.WithTTL(n.MinSessionTTL()-time.Millisecond))
	require.ErrorIs(t, err, coord.ErrInvalidTTL)
}

func TestSessionKeepsEphemeralKeysUntilClose(t *testing.T) {
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(1)
	s, err := n.NewSession(ctx, coord.WithTTL(time.Second))
	require.NoError(t, err)
	_, err = n.Put(ctx, "eph/a", []byte("1"), coord.Ephemeral(s))
	require.NoError(t, err)
	_, err = n.Put(ctx, "eph/b", []byte("2"), coord.Ephemeral(s))
	require.NoError(t, err)

	w := c.Node(2).Watch(ctx, "eph/")
	// Several TTLs pass: keep-alives hold the session.
	deadline := time.Now().Add(3 * s.TTL())
	for time.Now().Before(deadline) {
		select {
		case <-s.Done():
			t.Fatalf("session ended while kept alive: %v", s.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.True(t, s.Until().After(time.Now()))
	require.NoError(t, s.Close(ctx))
	<-s.Done()
	require.ErrorIs(t, s.Err(), coord.ErrSessionClosed)
	ev1, ev2 := <-w.Events(), <-w.Events()
	require.Equal(t, coord.EventDelete, ev1.Type)
	require.Equal(t, coord.EventDelete, ev2.Type)
	require.Equal(t, ev1.Rev, ev2.Rev, "the session's keys go in one revision")
	_, err = n.Put(ctx, "eph/c", []byte("3"), coord.Ephemeral(s))
	require.ErrorIs(t, err, coord.ErrSessionExpired)
}

func TestSessionSurvivesLeaderCrash(t *testing.T) {
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	leader := c.LeaderIndex()
	holder := (leader + 1) % 3
	s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(time.Second))
	require.NoError(t, err)
	_, err = c.Node(holder).Put(ctx, "k", []byte("v"), coord.Ephemeral(s))
	require.NoError(t, err)
	c.Crash(leader)
	c.LeaderIndex()
	end := time.Now().Add(3 * s.TTL())
	for time.Now().Before(end) {
		select {
		case <-s.Done():
			t.Fatalf("session expired after a failover: %v", s.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, err = c.Node(holder).Get(ctx, "k")
	require.NoError(t, err)
}

func TestDeadHolderSessionExpires(t *testing.T) {
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	leader := c.LeaderIndex()
	holder := (leader + 1) % 3
	observer := (leader + 2) % 3
	s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(time.Second))
	require.NoError(t, err)
	kv, err := c.Node(holder).Put(ctx, "k", []byte("v"), coord.Ephemeral(s))
	require.NoError(t, err)
	w := c.Node(observer).Watch(ctx, "k", coord.FromRev(kv.ModRev))
	crashed := time.Now()
	c.Crash(holder)
	ev := <-w.Events()
	require.Equal(t, coord.EventDelete, ev.Type)
	elapsed := time.Since(crashed)
	t.Logf("expired %v after the holder died (TTL %v)", elapsed, s.TTL())
	require.Less(t, elapsed, 2*s.TTL()+2*time.Second)
}
