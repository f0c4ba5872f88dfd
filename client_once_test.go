package coord_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// connectOffLeader connects a client to a member that is not the leader.
func connectOffLeader(t *testing.T, c *coordtest.Cluster) (*coord.Client, int) {
	t.Helper()
	lead := c.LeaderIndex()
	for range 20 {
		cl := connect(t, c)
		if m := memberIndex(c, cl.Member()); m != lead {
			return cl, m
		}
		require.NoError(t, cl.Close())
	}
	t.Fatalf("no client landed off the leader (seed %d)", c.Seed())
	return nil, -1
}

// A client's write in flight on a member that is cut off from the cell
// and then crashes is sent again through the next member: the call, with
// no deadline, returns its result, and the write applies once (a client
// used to end it ErrAmbiguous when the connection went).
func TestClientWriteSurvivesItsMember(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	cl, m := connectOffLeader(t, c)
	ctx := context.Background()
	c.Isolate(m) // the member takes the write and can forward it nowhere
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Put(ctx, "k", []byte("v"))
		errc <- err
	}()
	require.Eventually(t, func() bool { return c.Node(m).Status().Leader == "" }, 30*time.Second, 5*time.Millisecond)
	c.Crash(m)
	select {
	case err := <-errc:
		require.NoError(t, err, "seed %d", c.Seed())
	case <-time.After(60 * time.Second):
		t.Fatalf("the write still waits after its member crashed (seed %d)", c.Seed())
	}
	require.NotEqual(t, c.Name(m), cl.Member())
	c.Heal()
	c.Restart(m)
	kv, err := c.Leader().Get(ctx, "k")
	require.NoError(t, err)
	require.EqualValues(t, 1, kv.Version, "applied once (seed %d)", c.Seed())
}

// A client's write whose caller gave up comes back as an *AmbiguousError
// that Client.Outcome settles, and the outcome agrees with the state.
// Another client cannot settle it for the first (its owner is its own
// identity, whatever ID it names).
func TestClientOutcome(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	cl, m := connectOffLeader(t, c)
	other := connect(t, c)
	ctx := context.Background()
	// The member hears the leader (so it keeps serving its clients) but
	// its forwards are lost: the write is in the cell's hands, unseen.
	lead := c.LeaderIndex()
	c.Network().Block(c.Name(m), c.Name(lead))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := cl.Put(short, "job", []byte("done"))
	var amb *coord.AmbiguousError
	require.ErrorAs(t, err, &amb, "seed %d", c.Seed())
	require.ErrorIs(t, err, coord.ErrAmbiguous)
	c.Network().Unblock(c.Name(m), c.Name(lead))

	// Another client naming the same ID settles its own (empty) record.
	out, err := other.Outcome(ctx, amb.ID)
	require.NoError(t, err)
	require.False(t, out.Applied)

	out, err = cl.Outcome(ctx, amb.ID)
	require.NoError(t, err, "seed %d", c.Seed())
	kv, err := c.Leader().Get(ctx, "job")
	switch {
	case out.Applied:
		require.NoError(t, err)
		require.Equal(t, kv.ModRev, out.Rev)
	default:
		require.True(t, errors.Is(err, coord.ErrNotFound), "not applied, yet the key is there: %v", kv)
	}
	// Settled: asking again says the same, and the key stays as it is.
	again, err := cl.Outcome(ctx, amb.ID)
	require.NoError(t, err)
	require.Equal(t, out.Applied, again.Applied)
	_, err = cl.Put(ctx, "after", nil) // any copy still queued has landed
	require.NoError(t, err)
	kv2, err := c.Leader().Get(ctx, "job")
	if out.Applied {
		require.NoError(t, err)
		require.Equal(t, kv.ModRev, kv2.ModRev)
	} else {
		require.ErrorIs(t, err, coord.ErrNotFound)
	}
}

// An idempotency key through clients of one identity: resubmitted by a
// new client (as after a restart), the write applies once.
func TestClientIdempotencyKey(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	ctx := context.Background()
	same := func(cfg *coord.ClientConfig) { cfg.Name = "scheduler" }
	a := connect(t, c, same)
	first, err := a.Put(ctx, "jobs/9", []byte("ran"), coord.IdempotencyKey("job-9"))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	b := connect(t, c, same)
	again, err := b.Put(ctx, "jobs/9", []byte("ran"), coord.IdempotencyKey("job-9"))
	require.NoError(t, err)
	require.Equal(t, first.ModRev, again.ModRev)
	// Another identity's key of the same name is its own.
	o := connect(t, c)
	third, err := o.Put(ctx, "jobs/9", []byte("ran"), coord.IdempotencyKey("job-9"))
	require.NoError(t, err)
	require.Greater(t, third.ModRev, first.ModRev)
	require.False(t, slices.Contains([]int64{first.ModRev}, third.ModRev))
}
