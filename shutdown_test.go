package coord_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// A leader whose peers are cut cannot hand leadership over: Shutdown
// stops waiting for the hand-over when its context ends, closes the
// member anyway, and says so with the context's error. (goleak in
// TestMain checks that nothing of the abandoned hand-over lives on.)
func TestShutdownLeaderCutOffEndsAtDeadline(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	li := c.LeaderIndex()
	leader := c.Node(li)
	// A write first, so that a follower has answered the leader (it is
	// in touch, a hand-over is tried): the followers may know the leader
	// before it has heard back from any, and a leader in touch with
	// nobody closes at once, gracefully.
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, err := leader.Put(wctx, "k", []byte("v"))
	wcancel()
	require.NoError(t, err)
	c.Isolate(li)
	// Far shorter than the hand-over's own bound (three election
	// timeouts) and than the election timeout after which the cut-off
	// leader would step down by itself (then there is nothing to hand
	// over and the close would be graceful).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = leader.Shutdown(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	select {
	case <-leader.Done():
	default:
		t.Fatal("Shutdown returned before the member stopped")
	}
	require.NoError(t, leader.Close(), "Close after Shutdown is a no-op")
	require.NoError(t, leader.Shutdown(context.Background()), "so is a second Shutdown")
}

// A context that has already ended closes the member at once, without a
// hand-over: the rest of the cell elects a new leader.
func TestShutdownEndedContextClosesAtOnce(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	li := c.LeaderIndex()
	leader := c.Node(li)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := leader.Shutdown(ctx)
	require.ErrorIs(t, err, context.Canceled)
	<-leader.Done()
	other := c.Node((li + 1) % 3)
	require.Eventually(t, func() bool {
		st := other.Status()
		return st.Leader != "" && st.Leader != c.Name(li)
	}, 20*time.Second, 10*time.Millisecond, "the others elect a new leader")
}

// With time enough, Shutdown is Close: the leader hands over and the
// result is nil.
func TestShutdownGracefulHandsOver(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	li := c.LeaderIndex()
	leader := c.Node(li)
	before := leader.Status().Term
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, leader.Shutdown(ctx))
	other := c.Node((li + 1) % 3)
	require.Eventually(t, func() bool {
		st := other.Status()
		return st.Leader != "" && st.Leader != c.Name(li) && st.Term > before
	}, 20*time.Second, 10*time.Millisecond, "leadership moved")
}
