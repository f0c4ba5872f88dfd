package raftnode

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSequentialProposalsDropNothing: a single caller's proposals, one
// after another through the leader and through a follower, are never
// refused by a peer's checks. With persisting off the stepping path, a
// follower's acknowledgement often arrives before the leader's own write
// (holdEarlyAck); refused, it is repaired only by the next heartbeat
// round, a stall of a heartbeat interval per put (12 of 400 puts before
// the fix). Run it with both persist modes (persistMode).
func TestSequentialProposalsDropNothing(t *testing.T) {
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
