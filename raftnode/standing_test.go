package raftnode

import (
	"context"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A removal notice stops a member only when it is believable: from a
// member of its configuration, of its cell, with the incarnation it is
// known by, naming this member's ID and incarnation, and from a majority
// of the other voters (or repeated for an election timeout). Forged or
// misdirected notices change nothing, and a single one does not suffice.
func TestRemovalNoticeMustBeGenuine(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	c.put(lead, "k", "v")
	f := (lead + 1) % 3
	other := (lead + 2) % 3
	target := c.nodes[f]
	genuine := removedNotice{Target: target.ID(), Incarnation: c.header(f).incarnation}
	send := func(from string, h header, r removedNotice) {
		c.deliver(f, transport.Envelope{From: from, Data: h.encodeRemoved(r)})
	}
	for name, forge := range map[string]func(){
		"a stranger": func() { send("intruder", header{cell: testCellID, incarnation: 99}, genuine) },
		"another cell": func() {
			send(c.names[lead], header{cell: testCellID + 1, incarnation: c.header(lead).incarnation}, genuine)
		},
		"a member's new data directory": func() {
			send(c.names[lead], header{cell: testCellID, incarnation: 1 << 40}, genuine)
		},
		"another member's removal": func() {
			send(c.names[lead], c.header(lead), removedNotice{Target: c.nodes[other].ID(), Incarnation: c.header(other).incarnation})
		},
		"an earlier data directory": func() {
			send(c.names[lead], c.header(lead), removedNotice{Target: target.ID(), Incarnation: 1 << 50})
		},
		"one member alone, once": func() { send(c.names[lead], c.header(lead), genuine) },
	} {
		forge()
		require.NoError(t, target.Err(), name)
		select {
		case <-target.Done():
			t.Fatalf("%s stopped a healthy member", name)
		default:
		}
	}
	c.put(f, "still", "serving")
	c.requireRunning()

	// A majority of the other voters saying so is what a removal looks
	// like from a member that was cut off when it committed.
	send(c.names[lead], c.header(lead), genuine)
	send(c.names[other], c.header(other), genuine)
	<-target.Done()
	require.ErrorIs(t, target.Err(), errs.Removed)
}

// A member removed while cut off never gets its removal in its log; once
// it speaks again (a pre-vote), the others answer with notices, and it
// stops with errs.Removed. The others carry on.
func TestMemberRemovedWhileCutOffIsTold(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	c.put(lead, "k", "v")
	f := (lead + 1) % 3
	c.net.Isolate(c.names[f])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead = c.leader(f)
	require.NoError(t, c.nodes[lead].ChangeMembership(ctx, pb.ConfChangeRemoveNode, c.nodes[f].ID(), command.Member{Name: c.names[f]}))
	select {
	case <-c.nodes[f].Done():
		t.Fatal("stopped while cut off")
	default:
	}
	c.net.Heal()
	select {
	case <-c.nodes[f].Done():
	case <-ctx.Done():
		t.Fatal("the removed member kept running")
	}
	require.ErrorIs(t, c.nodes[f].Err(), errs.Removed)
	c.put(lead, "after", "removal")
	for i, n := range c.nodes {
		if i != f {
			require.NoError(t, n.Err())
		}
	}
}

// A member connected when its removal commits applies it (its own
// tombstone in the address book) and stops; its data directory is then
// refused by Start, with errs.Removed, whatever its configuration says.
func TestRemovedMemberStopsAndStaysRemoved(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	c.put(lead, "k", "v")
	f := (lead + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.nodes[lead].ChangeMembership(ctx, pb.ConfChangeRemoveNode, c.nodes[f].ID(), command.Member{Name: c.names[f]}))
	select {
	case <-c.nodes[f].Done():
	case <-ctx.Done():
		t.Fatal("the removed member kept running")
	}
	require.ErrorIs(t, c.nodes[f].Err(), errs.Removed)
	c.nodes[f].Stop(false)
	cfg := c.nodes[f].cfg
	cfg.Transport = c.net.Join(c.names[f] + "-again")
	_, err := Start(cfg)
	require.ErrorIs(t, err, errs.Removed)
	cfg.Transport.Close()
}
