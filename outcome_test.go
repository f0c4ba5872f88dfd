package coord_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// waitDone waits for a call's error, failing the test after a generous
// bound (a busy machine): the call must return, whatever it returns.
func waitDone(t *testing.T, c *coordtest.Cluster, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: still waiting 60s later (seed %d)", what, c.Seed())
		return nil
	}
}

// A Put with no deadline on a follower isolated just after the call
// returns once the partition heals, and applies once (issue finding 1:
// the forward the network dropped was never sent again).
func TestPutOnIsolatedFollowerReturnsAfterHeal(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	lead := c.LeaderIndex()
	f := (lead + 1) % 3
	c.Isolate(f)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Node(f).Put(context.Background(), "k", []byte("v"))
		errc <- err
	}()
	// Heal once the follower has forwarded into the void and lost sight
	// of its leader.
	require.Eventually(t, func() bool { return c.Node(f).Status().Leader == "" }, 30*time.Second, 5*time.Millisecond)
	c.Heal()
	require.NoError(t, waitDone(t, c, "a put across an isolation", errc), "seed %d", c.Seed())
	kv, err := c.Leader().Get(context.Background(), "k")
	require.NoError(t, err)
	require.EqualValues(t, 1, kv.Version, "applied once")
}

// Under continuous 10% message loss every Put with no deadline returns,
// each applied once.
func TestPutsUnderMessageLossReturn(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	c.Leader()
	c.SetDropRate(0.1)
	const writes = 30
	errc := make(chan error, writes)
	for i := range writes {
		go func() {
			_, err := c.Node(i%3).Put(context.Background(), fmt.Sprint("k", i), []byte("v"))
			errc <- err
		}()
	}
	for range writes {
		require.NoError(t, waitDone(t, c, "a put under loss", errc), "seed %d", c.Seed())
	}
	c.SetDropRate(0)
	for i := range writes {
		kv, err := c.Leader().Get(context.Background(), fmt.Sprint("k", i))
		require.NoError(t, err)
		require.EqualValues(t, 1, kv.Version, "seed %d: k%d applied once", c.Seed(), i)
	}
}

// Writes in flight on the followers when the leader is cut off complete
// once the new leader is known, without ErrAmbiguous (finding 2: they
// used to wait two election timeouts and end ambiguous).
func TestInFlightWritesSurviveLeaderLoss(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	old := c.LeaderIndex()
	// Followers' forwards still reach the old leader, nothing comes back:
	// it appends them and can commit none.
	for i := range 3 {
		if i != old {
			c.Network().Block(c.Name(old), c.Name(i))
		}
	}
	const writes = 20
	type outcome struct {
		i   int
		err error
	}
	outc := make(chan outcome, writes)
	for i := range writes {
		go func() {
			_, err := c.Node((old+1+i%2)%3).Put(context.Background(), fmt.Sprint("k", i), []byte("v"))
			outc <- outcome{i, err}
		}()
	}
	refused := map[int]bool{}
	for range writes {
		var o outcome
		select {
		case o = <-outc:
		case <-time.After(60 * time.Second):
			t.Fatalf("an in-flight put across a leader change: still waiting 60s later (seed %d)", c.Seed())
		}
		if errors.Is(o.err, coord.ErrNoQuorum) {
			// A definite outcome too, on a machine slow enough that the
			// followers went three election timeouts without a leader:
			// the write certainly did not happen (checked below).
			refused[o.i] = true
			continue
		}
		require.NoError(t, o.err, "seed %d", c.Seed())
	}
	c.Heal()
	for i := range 3 {
		if i != old {
			c.Network().Unblock(c.Name(old), c.Name(i))
		}
	}
	lead := c.Leader()
	for i := range writes {
		kv, err := lead.Get(context.Background(), fmt.Sprint("k", i))
		if refused[i] {
			require.ErrorIs(t, err, coord.ErrNotFound, "seed %d: k%d was refused with ErrNoQuorum, yet applied", c.Seed(), i)
			continue
		}
		require.NoError(t, err)
		require.EqualValues(t, 1, kv.Version, "seed %d: k%d applied once", c.Seed(), i)
	}
	if len(refused) > 0 {
		t.Logf("seed %d: %d of %d writes refused with ErrNoQuorum (no leader for three election timeouts)", c.Seed(), len(refused), writes)
	}
}

// A compare-and-set whose caller gave up comes back as an
// *AmbiguousError, and Outcome settles it (finding 3: the scheduler had
// to guess whether its "done" CAS happened).
func TestAmbiguousCASOutcome(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	lead := c.LeaderIndex()
	f := (lead + 1) % 3
	ctx := context.Background()
	// Through the follower, so it has heard the leader before the cut (a
	// follower that never knew one refuses the write as certainly not
	// applied, which is right but not what this test is about).
	_, err := c.Node(f).Put(ctx, "job", []byte("running"))
	require.NoError(t, err)

	c.Network().Block(c.Name(f), c.Name(lead))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Node(f).Put(short, "job", []byte("done"), coord.IfVersion(1))
	require.ErrorIs(t, err, coord.ErrAmbiguous)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var amb *coord.AmbiguousError
	require.ErrorAs(t, err, &amb)

	// The ID survives a round trip through text, as a caller would keep it.
	text, err := amb.ID.MarshalText()
	require.NoError(t, err)
	var id coord.WriteID
	require.NoError(t, id.UnmarshalText(text))
	require.Equal(t, amb.ID, id)

	// Asked through the leader while the follower's path is still cut:
	// it never applied, and never will.
	out, err := c.Node(lead).Outcome(ctx, id)
	require.NoError(t, err)
	require.False(t, out.Applied)
	c.Network().Unblock(c.Name(f), c.Name(lead))
	_, err = c.Node(f).Put(ctx, "after", nil)
	require.NoError(t, err)
	kv, err := c.Node(lead).Get(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, "running", string(kv.Value))
}

func TestOutcomeOfAppliedWrite(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		lead := c.LeaderIndex()
		f := (lead + 1) % 3
		ctx := context.Background()
		// The follower must know its leader before the cut: one that never
		// heard it refuses the write as certainly not applied (ErrNoQuorum),
		// CI's seed 3730824744957666194.
		_, err := c.Node(f).Put(ctx, "warm", nil)
		require.NoError(t, err)
		// The leader cannot answer the follower: the follower's write applies
		// on the cell, but the follower never sees it while blocked.
		c.Network().Block(c.Name(lead), c.Name(f))
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err = c.Node(f).Put(short, "k", []byte("v"))
		var amb *coord.AmbiguousError
		require.ErrorAs(t, err, &amb, "got %v", err)
		kv, err := c.Node(lead).Get(ctx, "k")
		require.NoError(t, err)
		out, err := c.Node(lead).Outcome(ctx, amb.ID)
		require.NoError(t, err)
		require.True(t, out.Applied)
		require.True(t, out.Succeeded)
		require.Equal(t, kv.ModRev, out.Rev)
		c.Network().Unblock(c.Name(lead), c.Name(f))
	})
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := context.Background()
	first, err := c.Node(0).Put(ctx, "jobs/17/result", []byte("ok"), coord.IdempotencyKey("job-17"))
	require.NoError(t, err)
	// Resubmitted through another member (as after a restart): applied once.
	again, err := c.Node(1).Put(ctx, "jobs/17/result", []byte("ok"), coord.IdempotencyKey("job-17"))
	require.NoError(t, err)
	require.Equal(t, first.ModRev, again.ModRev)
	require.EqualValues(t, 1, again.Version)
	_, err = c.Node(0).Put(ctx, "k", nil, coord.IdempotencyKey(string(make([]byte, 300))))
	require.ErrorIs(t, err, coord.ErrInvalidArgument)
	var id coord.WriteID
	require.ErrorIs(t, id.UnmarshalText([]byte("w1:zz")), coord.ErrInvalidArgument)
	_, err = c.Node(0).Outcome(ctx, coord.WriteID{})
	require.True(t, errors.Is(err, coord.ErrInvalidArgument))
}
