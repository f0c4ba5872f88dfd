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
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	f := (lead + 1) % 3
	c.net.Isolate(c.names[f])
	waitFor(t, "the isolated member to lose its leader", func() bool { return c.nodes[f].Status().Leader == 0 })

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
