package raftnode

import (
	"fmt"
	"strings"
	"testing"

	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// removedState is a member's state that also says removedID was removed.
type removedState struct {
	coreState
	removedID uint64
}

func (s removedState) WasRemoved(id uint64) (bool, error) {
	if id == s.removedID {
		return true, nil
	}
	return s.coreState.WasRemoved(id)
}

// strangerCell is a cell of m1..m3 led by m1, m3 cut off long enough to
// be out of contact; m2 hears m1.
func strangerCell(t *testing.T) *coreEnv {
	e := newCoreEnv(t)
	e.out = &strings.Builder{}
	e.addMembers(3, true)
	require.NoError(t, e.member("m1").c.rn.Campaign())
	e.settle()
	for _, o := range []string{"m1", "m2"} {
		e.cut[o+">m3"], e.cut["m3>"+o] = true, true
	}
	for range 3 { // past m3's contact window, short of its election timeout
		for _, m := range e.members {
			m.c.Tick()
		}
		e.settle()
	}
	require.False(t, e.member("m3").c.inContact())
	require.True(t, e.member("m2").c.inContact())
	return e
}

// strangerFrame is an envelope from stranger from (Raft ID id) to m,
// with cell cell, carrying a Raft message of type typ at term.
func strangerFrame(t *testing.T, m *coreMember, from string, id, cell uint64, typ pb.MessageType, term uint64) transport.Envelope {
	h := header{cell: cell, incarnation: 555}
	data, err := h.encodeRaft(&pb.Message{Type: typ.Enum(), From: new(id), To: new(m.c.id), Term: new(term)})
	require.NoError(t, err)
	return transport.Envelope{From: from, To: m.name, Data: data}
}

// Each admission rule refuses a stranger's envelope with its own reason,
// and a refused one changes nothing: no table entry, no term, no address.
func TestStrangerRefusals(t *testing.T) {
	t.Parallel()
	e := strangerCell(t)
	m3, m2 := e.member("m3"), e.member("m2")
	term := m3.c.status.Load().Term
	raftFrame := func(m *coreMember, from string, id, cell uint64, typ pb.MessageType) transport.Envelope {
		return strangerFrame(t, m, from, id, cell, typ, term+1)
	}
	other := func(kind wireKind, body []byte) transport.Envelope {
		return transport.Envelope{From: "m9", To: "m3", Data: append(header{cell: testCellID, incarnation: 555}.put(nil, kind), body...)}
	}
	m3.c.sm = removedState{coreState: m3.c.sm, removedID: 8}
	for _, tc := range []struct {
		name string
		to   *coreMember
		env  transport.Envelope
		want error
	}{
		{"another cell", m3, raftFrame(m3, "m9", 9, 7, pb.MsgHeartbeat), errDropCell},
		{"no cell", m3, raftFrame(m3, "m9", 9, 0, pb.MsgHeartbeat), errDropCell},
		{"From is not the name's ID", m3, raftFrame(m3, "m9", 10, testCellID, pb.MsgHeartbeat), errDropFrom},
		{"the name's ID is a member's", m3, raftFrame(m3, "m01", 1, testCellID, pb.MsgHeartbeat), errDropFrom},
		{"its own name", m3, raftFrame(m3, "m3", 3, testCellID, pb.MsgHeartbeat), errDropSender},
		{"a removed ID", m3, raftFrame(m3, "m8", 8, testCellID, pb.MsgApp), errDropRemovedSender},
		{"a proposal", m3, raftFrame(m3, "m9", 9, testCellID, pb.MsgProp), errDropStranger},
		{"a response", m3, raftFrame(m3, "m9", 9, testCellID, pb.MsgAppResp), errDropStranger},
		{"a vote", m3, raftFrame(m3, "m9", 9, testCellID, pb.MsgVoteResp), errDropStranger},
		{"a hand-over", m3, raftFrame(m3, "m9", 9, testCellID, pb.MsgTimeoutNow), errDropStranger},
		{"a read", m3, raftFrame(m3, "m9", 9, testCellID, pb.MsgReadIndex), errDropStranger},
		{"an application message", m3, other(kindApp, []byte("x")), errDropStranger},
		{"a probe", m3, other(kindProbe, nil), errDropStranger},
		{"a chunk before any append", m3, other(kindChunk, []byte{9, 1, 1, 0, 1}), errDropStranger},
		{"a member that hears its leader", m2, raftFrame(m2, "m9", 9, testCellID, pb.MsgApp), errDropInContact},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decodeEnvelope(tc.env.Data)
			require.NoError(t, err)
			_, err = tc.to.c.admitStranger(tc.env.From, d)
			require.ErrorIs(t, err, tc.want)
			drops := tc.to.c.drops.Load()
			tc.to.c.Step(tc.env)
			require.Equal(t, drops+1, tc.to.c.drops.Load(), "refused and counted")
			_, known := tc.to.c.strangers.id(tc.env.From)
			require.False(t, known)
			require.Equal(t, term, tc.to.c.rn.BasicStatus().HardState.GetTerm())
			require.Empty(t, tc.to.c.out.Peers)
		})
	}
	// A stranger that does everything right is admitted, and answered.
	addr := header{cell: testCellID, incarnation: 555}.encodePeerAddr(peerAddr{ID: 9, Addr: "addr-m9"})
	m3.c.Step(transport.Envelope{From: "m9", To: "m3", Data: addr})
	m3.c.Step(raftFrame(m3, "m9", 9, testCellID, pb.MsgHeartbeat))
	id, ok := m3.c.strangers.id("m9")
	require.True(t, ok)
	require.Equal(t, uint64(9), id)
	require.Equal(t, []peerChange{{name: "m9", addr: "addr-m9"}}, m3.c.out.Peers)
	rd := m3.c.Ready()
	require.Equal(t, uint64(9), rd.Lead)
	var answered bool
	for _, env := range rd.Messages {
		answered = answered || env.To == "m9"
	}
	require.True(t, answered, "the heartbeat is answered")
	m3.c.Advance(rd)
	// A stranger Raft follows may hand it no more than a leader's messages.
	d, err := decodeEnvelope(raftFrame(m3, "m9", 9, testCellID, pb.MsgTimeoutNow).Data)
	require.NoError(t, err)
	_, err = m3.c.admitStranger("m9", d)
	require.ErrorIs(t, err, errDropStranger)
}

// The table is bounded, and a stranger not confirmed by the applied
// membership expires, with the transport peer made for it.
func TestStrangerTableBoundAndExpiry(t *testing.T) {
	t.Parallel()
	e := strangerCell(t)
	m3 := e.member("m3")
	for i := range maxStrangers + 1 {
		name := fmt.Sprintf("s%d", i)
		id := IDFromName(name)
		m3.c.Step(transport.Envelope{From: name, To: "m3",
			Data: header{cell: testCellID, incarnation: 555}.encodePeerAddr(peerAddr{ID: id, Addr: "addr-" + name})})
	}
	require.Len(t, m3.c.strangers.m, maxStrangers)
	_, last := m3.c.strangers.id(fmt.Sprintf("s%d", maxStrangers))
	require.False(t, last, "refused when full")
	rd := m3.c.Ready()
	require.Len(t, rd.Peers, maxStrangers)
	m3.c.Advance(rd)
	for range strangerTTLElections*envElection + 1 {
		m3.c.Tick()
	}
	require.Empty(t, m3.c.strangers.m)
	rd = m3.c.Ready()
	require.Len(t, rd.Peers, maxStrangers)
	for _, pc := range rd.Peers {
		require.True(t, pc.remove)
	}
	m3.c.Advance(rd)
}

// A member sends its address ahead of a leader's message only to a peer
// it has not heard from lately, once a heartbeat interval: a healthy
// cell sends none.
func TestTellAddressOnlyToSilentPeers(t *testing.T) {
	t.Parallel()
	e := strangerCell(t)
	m1 := e.member("m1")
	m1.c.Tick()
	rd := m1.c.Ready()
	var told []string
	for _, env := range rd.Messages {
		if d, err := decodeEnvelope(env.Data); err == nil && d.kind == kindPeerAddr {
			told = append(told, env.To)
			require.Equal(t, "addr-m1", d.addr.Addr)
			require.Equal(t, m1.c.id, d.addr.ID)
			t.Logf("peer address envelope: %d bytes", len(env.Data))
		}
	}
	m1.c.Advance(rd)
	require.Equal(t, []string{"m3"}, told, "m2 answers, m3 is silent")
}
