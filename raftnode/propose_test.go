package raftnode

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/stretchr/testify/require"
)

// TestAbandonedProposalIsNeverProposed: a caller that gave up while its
// proposal waited for a leader was told ErrNoQuorum, "it did not happen";
// the proposal must then not be handed to the leader that appears later
// (the linearizability test found a put reported so and read back).
func TestAbandonedProposalIsNeverProposed(t *testing.T) {
	t.Parallel()
	c, f := cellWithIsolatedFollower(t)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.nodes[f].Propose(ctx, putCmd("abandoned", "x"))
	require.ErrorIs(t, err, errs.NoQuorum)
	require.False(t, errors.Is(err, errs.Ambiguous), "a proposal that never left the member is not ambiguous: %v", err)

	c.net.Heal()
	// A later put through the same member flushes whatever it still
	// holds; once every member applied it, the abandoned one would be
	// there too had it been proposed.
	c.put(f, "after", "y")
	data := c.converged()
	require.Equal(t, "y", data["after"])
	require.NotContains(t, data, "abandoned")
}

// TestProposalWaitingWhenMemberStopsIsClosed: a member that stops (its
// transport closed under it) while a proposal, never handed to Raft,
// waits for a leader answers ErrClosed, not ErrNoQuorum: the stop is the
// reason. A client told ErrNoQuorum by the member it wrote through took
// it for the cell's answer and gave up instead of going to the next
// member (seed 6214853903376234965 of the root
// TestClientWriteSurvivesItsMember; 1 of 10 runs failed here before the
// fix, when the caller saw the stop before the answer to every waiter).
func TestProposalWaitingWhenMemberStopsIsClosed(t *testing.T) {
	t.Parallel()
	c, f := cellWithIsolatedFollower(t)

	res := make(chan error, 1)
	go func() {
		_, err := c.nodes[f].Propose(context.Background(), putCmd("k", "v"))
		res <- err
	}()
	waitFor(t, "the proposal to wait", func() bool {
		w := &c.nodes[f].c.waiters
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.m) > 0
	})
	// As coordtest's Crash does: the transport closes under the member,
	// which fails and stops.
	require.NoError(t, c.nodes[f].tr.Close())
	err := <-res
	require.ErrorIs(t, err, errs.Closed)
	require.NotErrorIs(t, err, errs.NoQuorum, "the member stopped; the cell's quorum was never asked")
	require.NotErrorIs(t, err, errs.Ambiguous, "a proposal that never left the member is not ambiguous")
}

// cellWithIsolatedFollower is a 3-member cell with one follower, f, cut
// off from the others until it has lost its leader.
func cellWithIsolatedFollower(t *testing.T) (*testCell, int) {
	t.Helper()
	c := newTestCell(t, 3, nil)
	f := (c.leader() + 1) % 3
	c.net.Isolate(c.names[f])
	waitFor(t, "the isolated member to lose its leader", func() bool { return c.nodes[f].Status().Leader == 0 })
	return c, f
}
