package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/stretchr/testify/require"
)

// version returns key's version on member i (0 = absent).
func (c *testCell) version(i int, key string) int64 {
	c.t.Helper()
	kv, ok, err := c.stores[i].StateMachine().Get(key)
	require.NoError(c.t, err)
	if !ok {
		return 0
	}
	return kv.Version
}

// A follower's forward that the network drops, with no change of leader,
// is handed to Raft again: the caller, with no deadline, gets its result,
// and the command applies once (issue: a write could wait forever).
func TestDroppedForwardIsResent(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	f := (lead + 1) % 3
	c.net.Block(c.names[f], c.names[lead])
	res := make(chan error, 1)
	go func() {
		_, err := c.nodes[f].Propose(context.Background(), putCmd("k", "v"))
		res <- err
	}()
	waitFor(t, "the forward to be sent again", func() bool { return c.nodes[f].Metrics().ProposalsResent >= 2 })
	require.Zero(t, c.version(lead, "k"), "nothing reached the leader")
	c.net.Unblock(c.names[f], c.names[lead])
	select {
	case err := <-res:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the write still waits after the path healed")
	}
	c.converged()
	require.EqualValues(t, 1, c.version(lead, "k"), "applied once")
}

// Commands in flight to a leader that is cut off are handed to the new
// leader as soon as it is known: they apply (once), instead of ending
// ErrAmbiguous two election timeouts later.
func TestInFlightCommandsFollowTheNewLeader(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	old := c.leader()
	f := (old + 1) % 3
	// The old leader hears the follower but can send nothing: it appends
	// what the follower forwards and never commits it.
	for i := range c.nodes {
		if i != old {
			c.net.Block(c.names[old], c.names[i])
		}
	}
	const writes = 20
	res := make(chan error, writes)
	for i := range writes {
		go func() {
			_, err := c.nodes[f].Propose(context.Background(), putCmd(fmt.Sprint("k", i), "v"))
			res <- err
		}()
	}
	lead := c.leader(old)
	require.NotEqual(t, old, lead)
	for range writes {
		select {
		case err := <-res:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("an in-flight write still waits after the new leader was elected")
		}
	}
	require.Zero(t, c.nodes[f].Metrics().ProposalsAmbiguous)
	for i := range c.nodes {
		if i != old {
			c.net.Unblock(c.names[old], c.names[i])
		}
	}
	c.converged()
	for i := range writes {
		require.EqualValues(t, 1, c.version(lead, fmt.Sprint("k", i)), "k%d applied once", i)
	}
}

// A caller whose context ends while its command is in flight gets an
// AmbiguousError naming the command, and a resolve of it settles the
// outcome: the command's result, or never applied (and a late copy then
// changes nothing).
func TestAmbiguousOutcomeCanBeSettled(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	f := (lead + 1) % 3
	c.net.Block(c.names[f], c.names[lead])
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := c.nodes[f].Propose(ctx, putCmd("k", "v"))
		res <- err
	}()
	waitFor(t, "the forward to be sent", func() bool { return c.nodes[f].Metrics().ProposalsResent >= 1 })
	cancel()
	err := <-res
	require.ErrorIs(t, err, errs.Ambiguous)
	require.ErrorIs(t, err, context.Canceled)
	var amb *AmbiguousError
	require.ErrorAs(t, err, &amb)
	require.NotZero(t, amb.Proposer.Seq)

	// Settled through the leader (the follower's path is still cut): it
	// never applied, and now never will.
	p := amb.Proposer
	settle, err := c.nodes[lead].Propose(context.Background(), &command.Command{Kind: command.KindResolve, Proposer: &p})
	require.NoError(t, err)
	require.Equal(t, command.StatusNotApplied, settle.Status)
	c.net.Unblock(c.names[f], c.names[lead])
	c.put(f, "after", "x") // any copy still queued has reached the log by now
	c.converged()
	require.Zero(t, c.version(lead, "k"))
}

// Under 10% message loss every call with no deadline returns, each
// command applied once.
func TestProposalsUnderLossAllReturn(t *testing.T) {
	t.Parallel()
	const seed = 1 // the test network's loss seed (newTestCell)
	c := newTestCell(t, 3, nil)
	c.leader()
	c.net.SetDropRate(0.1)
	const writes = 40
	res := make(chan error, writes)
	for i := range writes {
		go func() {
			_, err := c.nodes[i%3].Propose(context.Background(), putCmd(fmt.Sprint("k", i), "v"))
			res <- err
		}()
	}
	for range writes {
		select {
		case err := <-res:
			require.NoError(t, err, "seed %d", seed)
		case <-time.After(60 * time.Second):
			t.Fatalf("a write still waits under 10%% loss (seed %d)", seed)
		}
	}
	c.net.SetDropRate(0)
	c.converged()
	lead := c.leader()
	for i := range writes {
		require.EqualValues(t, 1, c.version(lead, fmt.Sprint("k", i)), "seed %d: k%d applied once", seed, i)
	}
}
