package raftnode

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSequentialProposalsDropNothing: a single caller's proposals, one
// after another through the leader and through a follower, are never
// refused by a peer's checks (a follower's acknowledgement refused is
// repaired only by the next heartbeat round: a stall per put).
func TestSequentialProposalsDropNothing(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	follower := (lead + 1) % 3
	for i := range 200 {
		c.put(lead, fmt.Sprintf("l%d", i%16), "v")
		c.put(follower, fmt.Sprintf("f%d", i%16), "v")
	}
	for i, n := range c.nodes {
		require.Zero(t, n.Status().Dropped, "member %d refused messages", i)
	}
}
