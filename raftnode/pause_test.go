package raftnode

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/stretchr/testify/require"
)

// A paused leader stands still: its status does not move while the
// others elect a new leader and commit without it; on Resume it steps
// down and catches up.
func TestPausedLeaderIsReplacedAndCatchesUp(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	old := c.leader()
	c.put(old, "before", "1")
	select {
	case <-c.nodes[old].Unpaused():
	default:
		t.Fatal("a running node's Unpaused channel is open")
	}

	c.nodes[old].Pause()
	unpaused := c.nodes[old].Unpaused()
	frozen := c.nodes[old].Status()
	lead := c.leader(old)
	require.NotEqual(t, old, lead)
	c.put(lead, "during", "2")
	require.Equal(t, frozen, c.nodes[old].Status(), "a paused member's status moved")
	select {
	case <-unpaused:
		t.Fatal("Unpaused closed while paused")
	default:
	}

	c.nodes[old].Resume()
	<-unpaused
	require.Equal(t, map[string]string{"before": "1", "during": "2"}, c.converged())
	require.Equal(t, RoleFollower, c.nodes[old].Status().Role)
	c.requireRunning()
}

// Stop ends a paused member, and its callers get ErrClosed.
func TestStopWhilePaused(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	n := c.nodes[lead]
	n.Pause()
	res := make(chan error, 1)
	go func() {
		_, err := n.Propose(context.Background(), putCmd("k", "v"))
		res <- err
	}()
	stopped := make(chan struct{})
	go func() {
		n.Stop(true)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop hung on a paused member")
	}
	err := <-res
	require.True(t, errors.Is(err, errs.Closed) || errors.Is(err, errs.NoQuorum), "%v", err)
}

// A command pending on a member whose entry then reaches it only inside
// a snapshot gets its result as soon as the snapshot is installed (the
// proposer table travels in it), not at its deadline; readers waiting for
// an index the snapshot covers are released too.
func TestSnapshotAnswersCoveredWaiters(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, func(cfg *Config) { cfg.CompactEvery, cfg.CatchUpEntries = 20, 5 })
	lead := c.leader()
	cut := (lead + 1) % 3
	for i := range c.nodes {
		if i != cut {
			c.net.Block(c.names[i], c.names[cut]) // it can still forward to the leader
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := c.nodes[cut].Propose(ctx, putCmd("from-cut", "x"))
		res <- err
	}()
	waitFor(t, "the forwarded command to apply on the leader", func() bool { return len(c.data(lead)) == 1 })
	for i := range 60 {
		c.put(lead, "k"+string(rune('a'+i%26))+string(rune('a'+i/26)), "v")
	}
	covered := c.nodes[lead].AppliedIndex()
	waitFor(t, "the leader to compact past the cut member", func() bool {
		first, _ := c.stores[lead].RaftLog().FirstIndex()
		return first > c.nodes[cut].Status().LastIndex+1
	})
	read := make(chan error, 1)
	go func() { read <- c.nodes[cut].WaitApplied(ctx, covered) }()

	for i := range c.nodes {
		if i != cut {
			c.net.Unblock(c.names[i], c.names[cut])
		}
	}
	// The waiter ends when the snapshot is installed, before the apply
	// loop reaches its index (which releases the reader).
	require.NoError(t, <-read)
	select {
	case err := <-res:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the covered command still waits after the snapshot")
	}
	require.Equal(t, c.data(lead), c.converged())
}
