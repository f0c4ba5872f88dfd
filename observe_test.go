package coord_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestObserveElectionWithoutSession: a process with no session follows a
// group's leadership through ObserveElection and ElectionLeader: vacant,
// a leader, a proclaimed value, the next leader, vacant again.
func TestObserveElectionWithoutSession(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 30*time.Second)
	observer := c.Node(2)

	l, err := coord.ElectionLeader(ctx, observer, "watched")
	require.ErrorIs(t, err, coord.ErrNoLeader)
	require.True(t, l.Vacant)
	_, err = coord.ElectionLeader(ctx, observer, "")
	require.ErrorIs(t, err, coord.ErrInvalidKey)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := coord.ObserveElection(octx, observer, "watched")
	require.True(t, recv(t, ctx, ch).Vacant)

	e1 := coord.NewElection(newSession(t, ctx, c.Node(0), 2*time.Second), "watched")
	t1, err := e1.Campaign(ctx, "one")
	require.NoError(t, err)
	e2 := coord.NewElection(newSession(t, ctx, c.Node(1), 2*time.Second), "watched")
	second := async(ctx, func(ctx context.Context) (coord.Token, error) { return e2.Campaign(ctx, "two") })

	got := recv(t, ctx, ch)
	require.Equal(t, coord.Leader{Value: "one", Token: t1, Session: got.Session, Key: e1.Key()}, got)
	require.NoError(t, e1.Proclaim(ctx, "one'"))
	require.Equal(t, "one'", recv(t, ctx, ch).Value)
	l, err = coord.ElectionLeader(ctx, observer, "watched")
	require.NoError(t, err)
	require.Equal(t, "one'", l.Value)

	require.NoError(t, e1.Resign(ctx))
	r := recv(t, ctx, second)
	require.NoError(t, r.err)
	got = recv(t, ctx, ch)
	if got.Vacant {
		// e2's campaign may not have queued its key before e1 resigned
		// (nothing here orders them): then the group is vacant in between.
		got = recv(t, ctx, ch)
	}
	require.Equal(t, "two", got.Value)
	require.Equal(t, r.token, got.Token)
	require.NoError(t, e2.Resign(ctx))
	require.True(t, recv(t, ctx, ch).Vacant)

	cancel()
	for range ch {
	}
	empty := coord.ObserveElection(ctx, observer, "")
	_, open := <-empty
	require.False(t, open, "an empty group's channel closes at once")
}
