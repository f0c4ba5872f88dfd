package raftnode

import (
	"testing"

	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A member of another cell (an old process still running on a reused
// address, another test's cell) is a member's name with the wrong cell
// ID: whatever it says is dropped, however well formed.
func TestEnvelopesFromAnotherCellAreDropped(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	c.put(lead, "k", "v")
	before := c.converged()
	follower := (lead + 1) % 3
	st := c.nodes[follower].Status()
	dropped := st.Dropped
	other := header{cell: testCellID + 1, incarnation: c.header(lead).incarnation}
	// A leader's append at a newer term, from the wrong cell: applied, it
	// would depose the leader and rewrite the log.
	m := &pb.Message{Type: pb.MsgApp.Enum(), From: new(c.nodes[lead].ID()), To: new(c.nodes[follower].ID()),
		Term: new(st.Term + 5), Index: new(st.LastIndex), LogTerm: new(st.Term), Commit: new(st.Commit)}
	data, err := other.encodeRaft(m)
	require.NoError(t, err)
	c.deliver(follower, transport.Envelope{From: c.names[lead], Data: data})
	require.Equal(t, dropped+1, c.nodes[follower].Status().Dropped)
	require.Equal(t, st.Term, c.nodes[follower].Status().Term, "a frame of another cell changed the term")
	c.requireRunning()
	require.Equal(t, before, c.converged())
}

// The incarnation a member first heard from a peer is the one it
// believes: a frame with another one comes from a data directory that
// may have lost its vote, and is dropped (and its sender told).
func TestEnvelopesFromAnotherIncarnationAreDropped(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	c.put(lead, "k", "v")
	follower := (lead + 1) % 3
	st := c.nodes[follower].Status()
	wiped := header{cell: testCellID, incarnation: 1 << 40}
	m := &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(c.nodes[lead].ID()), To: new(c.nodes[follower].ID()),
		Term: new(st.Term), Commit: new(st.Commit)}
	data, err := wiped.encodeRaft(m)
	require.NoError(t, err)
	c.deliver(follower, transport.Envelope{From: c.names[lead], Data: data})
	require.Equal(t, st.Dropped+1, c.nodes[follower].Status().Dropped)
	c.requireRunning()
}

// A member whose cell ID is not known yet (it joined) learns it from the
// first member that speaks to it, and persists it.
func TestJoinerLearnsTheCellID(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 1, nil)
	n := c.nodes[0]
	// The core belongs to the raft loop: admit on it, not beside it.
	var first, second bool
	onLoop(n, func() {
		n.c.ident.cell.Store(0)
		first = n.c.admitCell("m0", 0xabc)
	})
	require.True(t, first)
	require.Equal(t, uint64(0xabc), n.CellID())
	id, ok, err := n.store.Identity()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(0xabc), id.CellID)
	onLoop(n, func() { second = n.c.admitCell("m0", 0xabd) })
	require.False(t, second, "once learned, another cell is refused")
}
