package raftnode

import (
	"testing"

	"github.com/coordcell/coord/internal/command"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The two one-frame kills of the issue: an empty MsgProp panicked the
// leader's Raft, a heartbeat committing 2^40 a follower's. Both are now
// dropped and counted, and the cell carries on.
func TestOneFrameCannotKillAMember(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	c.put(lead, "k", "v")
	fol := (lead + 1) % 3
	other := (lead + 2) % 3
	term := c.nodes[lead].Status().Term

	c.deliverRaft(lead, fol, &pb.Message{Type: pb.MsgProp.Enum(), From: new(c.nodes[fol].id), To: new(c.nodes[lead].id)})
	c.deliverRaft(fol, lead, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(c.nodes[lead].id), To: new(c.nodes[fol].id),
		Term: new(term), Commit: new(uint64(1) << 40)})
	c.requireRunning()
	require.Positive(t, c.nodes[lead].Status().Dropped)
	require.Positive(t, c.nodes[fol].Status().Dropped)

	c.put(other, "k2", "v2")
	require.Equal(t, map[string]string{"k": "v", "k2": "v2"}, c.converged())
}

func confChangeEntry(t *testing.T, typ pb.ConfChangeType, id uint64) *pb.Entry {
	cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(id)}}}
	data, err := proto.Marshal(cc)
	require.NoError(t, err)
	return &pb.Entry{Type: pb.EntryConfChangeV2.Enum(), Data: data}
}

// Each check refuses what it is for, and lets the ordinary through.
func TestCheckRaft(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	c.put(lead, "k", "v")
	fol := (lead + 1) % 3
	L, F := c.nodes[lead], c.nodes[fol]
	st := F.Status()
	term, last := st.Term, st.LastIndex
	cmd := entry(t, putCmd("x", "y"))
	cmd.Type = nil

	msg := func(typ pb.MessageType, from, to *Node, term uint64) *pb.Message {
		return &pb.Message{Type: typ.Enum(), From: new(from.id), To: new(to.id), Term: new(term)}
	}
	with := func(m *pb.Message, f func(m *pb.Message)) *pb.Message { f(m); return m }
	app := func(ents ...*pb.Entry) *pb.Message {
		return with(msg(pb.MsgApp, L, F, term), func(m *pb.Message) {
			m.Index, m.LogTerm, m.Entries = new(last), new(term), ents
		})
	}
	ent := func(i, tm uint64) *pb.Entry { return &pb.Entry{Index: new(i), Term: new(tm)} }
	snap := func(cs *pb.ConfState) *pb.Message {
		return with(msg(pb.MsgSnap, L, F, term), func(m *pb.Message) {
			m.Snapshot = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(last), Term: new(term), ConfState: cs}}
		})
	}
	voters := F.sm.ConfState().GetVoters()

	for _, tc := range []struct {
		name   string
		to     *Node // default F
		sender string
		m      *pb.Message
		want   error
	}{
		{"heartbeat", F, L.cfg.Name, with(msg(pb.MsgHeartbeat, L, F, term), func(m *pb.Message) { m.Commit = new(last) }), nil},
		{"local type", F, L.cfg.Name, msg(pb.MsgHup, L, F, term), errDropType},
		{"forget leader", F, L.cfg.Name, msg(pb.MsgForgetLeader, L, F, term), errDropType},
		{"unknown type", F, L.cfg.Name, msg(pb.MessageType(99), L, F, term), errDropType},
		{"stranger", F, "intruder", msg(pb.MsgHeartbeat, L, F, term), errDropSender},
		{"self", F, F.cfg.Name, msg(pb.MsgHeartbeat, F, F, term), errDropSender},
		{"From not sender", F, c.names[(lead+2)%3], msg(pb.MsgHeartbeat, L, F, term), errDropFrom},
		{"To not us", F, L.cfg.Name, msg(pb.MsgHeartbeat, L, L, term), errDropTo},
		{"no term", F, L.cfg.Name, msg(pb.MsgHeartbeat, L, F, 0), errDropTerm},
		{"prop with term", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 1), func(m *pb.Message) { m.Entries = []*pb.Entry{cmd} }), errDropTerm},
		{"not the leader", F, c.names[(lead+2)%3], msg(pb.MsgHeartbeat, c.nodes[(lead+2)%3], F, term), errDropNotLeader},
		{"commit past log", F, L.cfg.Name, with(msg(pb.MsgHeartbeat, L, F, term), func(m *pb.Message) { m.Commit = new(uint64(1) << 40) }), errDropCommit},
		{"append", F, L.cfg.Name, app(ent(last+1, term), ent(last+2, term)), nil},
		{"append gap", F, L.cfg.Name, app(ent(last+2, term)), errDropEntries},
		{"append term above message's", F, L.cfg.Name, app(ent(last+1, term+1)), errDropEntries},
		{"append terms decrease", F, L.cfg.Name, app(ent(last+1, term), ent(last+2, term-1)), errDropEntries},
		{"append logterm above term", F, L.cfg.Name, with(app(), func(m *pb.Message) { m.LogTerm = new(term + 1) }), errDropTerm},
		{"append index overflows", F, L.cfg.Name, with(app(ent(0, term)), func(m *pb.Message) { m.Index = new(^uint64(0)) }), errDropIndex},
		{"append bad conf change", F, L.cfg.Name, app(&pb.Entry{Index: new(last + 1), Term: new(term), Type: pb.EntryConfChangeV2.Enum(), Data: []byte{0xff}}), errDropConfChange},
		{"prop", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) { m.Entries = []*pb.Entry{cmd} }), nil},
		{"empty prop", L, F.cfg.Name, msg(pb.MsgProp, F, L, 0), errDropProposal},
		{"prop empty command", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) { m.Entries = []*pb.Entry{{}} }), errDropProposal},
		{"prop unknown format", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) { m.Entries = []*pb.Entry{{Data: []byte{0xee}}} }), errDropProposal},
		{"prop with index", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) {
			m.Entries = []*pb.Entry{{Index: new(uint64(5)), Data: cmd.Data}}
		}), errDropProposal},
		{"prop too large", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) {
			m.Entries = []*pb.Entry{{Data: append([]byte{cmd.Data[0]}, make([]byte, defaultMaxProposalBytes)...)}}
		}), errDropProposal},
		{"conf change", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) {
			m.Entries = []*pb.Entry{confChangeEntry(t, pb.ConfChangeAddLearnerNode, 77)}
		}), nil},
		{"conf change undecodable", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) {
			m.Entries = []*pb.Entry{{Type: pb.EntryConfChange.Enum(), Data: []byte{0xff, 0xff}}}
		}), errDropConfChange},
		{"conf change of node 0", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) {
			m.Entries = []*pb.Entry{confChangeEntry(t, pb.ConfChangeAddNode, 0)}
		}), errDropConfChange},
		{"conf change unknown type", L, F.cfg.Name, with(msg(pb.MsgProp, F, L, 0), func(m *pb.Message) {
			m.Entries = []*pb.Entry{confChangeEntry(t, pb.ConfChangeType(9), 7)}
		}), errDropConfChange},
		{"read index", L, F.cfg.Name, with(msg(pb.MsgReadIndex, F, L, 0), func(m *pb.Message) { m.Entries = []*pb.Entry{{Data: []byte("12345678")}} }), nil},
		{"read index without context", L, F.cfg.Name, msg(pb.MsgReadIndex, F, L, 0), errDropEntries},
		{"ack past log", L, F.cfg.Name, with(msg(pb.MsgAppResp, F, L, term), func(m *pb.Message) { m.Index = new(last + 1000) }), errDropIndex},
		{"ack", L, F.cfg.Name, with(msg(pb.MsgAppResp, F, L, term), func(m *pb.Message) { m.Index = new(last) }), nil},
		{"timeout now from a follower", L, F.cfg.Name, msg(pb.MsgTimeoutNow, F, L, term), errDropNotLeader},
		{"vote logterm past term", F, L.cfg.Name, with(msg(pb.MsgVote, L, F, term+1), func(m *pb.Message) { m.LogTerm = new(term + 2) }), errDropTerm},
		{"snapshot", F, L.cfg.Name, snap(&pb.ConfState{Voters: voters}), nil},
		{"snapshot without voters", F, L.cfg.Name, snap(&pb.ConfState{}), errDropSnapshot},
		{"snapshot voter twice", F, L.cfg.Name, snap(&pb.ConfState{Voters: []uint64{voters[0], voters[0]}}), errDropSnapshot},
		{"snapshot voter and learner", F, L.cfg.Name, snap(&pb.ConfState{Voters: voters, Learners: voters[:1]}), errDropSnapshot},
		{"snapshot voter zero", F, L.cfg.Name, snap(&pb.ConfState{Voters: []uint64{0}}), errDropSnapshot},
		{"snapshot joint", F, L.cfg.Name, snap(&pb.ConfState{Voters: voters, VotersOutgoing: voters}), errDropSnapshot},
		{"snapshot without metadata", F, L.cfg.Name, with(msg(pb.MsgSnap, L, F, term), func(m *pb.Message) { m.Snapshot = &pb.Snapshot{} }), errDropSnapshot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, checkRaft(tc.to, tc.sender, tc.m), tc.want)
			if tc.want == nil {
				require.NoError(t, checkRaft(tc.to, tc.sender, tc.m))
			}
		})
	}

	// Chunks come only from the leader, naming itself.
	require.NoError(t, F.c.checkChunk(L.cfg.Name, &chunk{From: L.id, Index: 5, Term: term}))
	require.ErrorIs(t, F.c.checkChunk(c.names[(lead+2)%3], &chunk{From: c.nodes[(lead+2)%3].id, Index: 5, Term: term}), errDropChunk)
	require.ErrorIs(t, F.c.checkChunk(L.cfg.Name, &chunk{From: F.id, Index: 5, Term: term}), errDropChunk)
	require.ErrorIs(t, F.c.checkChunk(L.cfg.Name, &chunk{From: L.id, Index: 5, Term: term + 1}), errDropChunk)
	require.ErrorIs(t, F.c.checkChunk(L.cfg.Name, &chunk{From: L.id, Index: 5, Term: term, Data: make([]byte, maxChunkBytes+1)}), errDropChunk)
	require.NoError(t, L.c.checkAck(F.cfg.Name, &chunkAck{From: F.id}))
	require.ErrorIs(t, L.c.checkAck(F.cfg.Name, &chunkAck{From: c.nodes[(lead+2)%3].id}), errDropChunk)
	c.requireRunning()
}

// The cost of the checks on the two commonest messages.
func BenchmarkCheckRaft(b *testing.B) {
	c := newTestCell(b, 3, nil)
	lead := c.leader()
	fol := (lead + 1) % 3
	L, F := c.nodes[lead], c.nodes[fol]
	st := F.Status()
	ents := make([]*pb.Entry, 16)
	for i := range ents {
		ents[i] = &pb.Entry{Index: new(st.LastIndex + 1 + uint64(i)), Term: new(st.Term), Data: []byte("a command of some size")}
	}
	app := &pb.Message{Type: pb.MsgApp.Enum(), From: new(L.id), To: new(F.id), Term: new(st.Term),
		Index: new(st.LastIndex), LogTerm: new(st.Term), Entries: ents}
	ack := &pb.Message{Type: pb.MsgAppResp.Enum(), From: new(F.id), To: new(L.id), Term: new(st.Term), Index: new(st.LastIndex)}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if F.c.checkRaft(L.cfg.Name, app) != nil || L.c.checkRaft(F.cfg.Name, ack) != nil {
			b.Fatal("refused")
		}
	}
}

// A learner may update its own record (its client address) but not move
// its transport address: movesPeer tells the two apart, and takes a
// context it cannot read for a move.
func TestMovesPeer(t *testing.T) {
	t.Parallel()
	withCtx := func(ctx []byte) *pb.Entry {
		cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeUpdateNode.Enum(), NodeId: new(uint64(7))}}, Context: ctx}
		data, err := proto.Marshal(cc)
		require.NoError(t, err)
		return &pb.Entry{Type: pb.EntryConfChangeV2.Enum(), Data: data}
	}
	member := func(m command.Member) []byte {
		b, err := command.EncodeMember(&m)
		require.NoError(t, err)
		return b
	}
	require.False(t, movesPeer(withCtx(member(command.Member{Name: "l", ClientAddr: "l:2"}))))
	require.True(t, movesPeer(withCtx(member(command.Member{Name: "l", PeerAddr: "l:9"}))))
	require.True(t, movesPeer(withCtx([]byte{0xff})))
	require.True(t, movesPeer(&pb.Entry{Type: pb.EntryConfChangeV2.Enum(), Data: []byte{0xff}}))
}
