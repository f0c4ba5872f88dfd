package raftnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A follower's proposal that reaches the leader while it hands over
// leadership is refused by Raft; it must still apply (here once the
// hand-over fails and the old leader leads on), not wait for an outcome
// nobody will report.
func TestProposalRefusedDuringTransferStillApplies(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, func(cfg *Config) { cfg.ElectionTicks = 50 })
	lead := c.leader()
	target, other := (lead+1)%3, (lead+2)%3
	c.put(other, "warm", "x")
	// The transferee never hears from the leader, so the hand-over hangs
	// until raft gives it up after an election timeout.
	c.net.Block(c.names[lead], c.names[target])
	pending := make(chan bool, 1)
	ln := c.nodes[lead]
	ln.runOnLoop(func() {
		ln.c.rn.TransferLeader(c.nodes[target].ID())
		pending <- ln.c.rn.Status().LeadTransferee != 0
	})
	require.True(t, <-pending, "the hand-over should be under way")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.nodes[other].Propose(ctx, putCmd("during", "transfer"))
	require.NoError(t, err)
	c.net.Unblock(c.names[lead], c.names[target])
	require.Equal(t, "transfer", c.converged()["during"])
}
