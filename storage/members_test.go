package storage

import (
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/wirebytes"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// An address book record written before client addresses (format 1:
// name and transport address) still decodes, with no client address;
// one with a client address is format 2 and round-trips; format 1 stays
// what a record without a client address is written as, byte for byte.
func TestMemberRecordFormats(t *testing.T) {
	t.Parallel()
	old := []byte{memberFormat1}
	old = wirebytes.AppendString(old, "n1")
	old = wirebytes.AppendString(old, "10.0.0.1:7000")
	m, err := decodeMemberRecord(7, old)
	require.NoError(t, err)
	require.Equal(t, MemberInfo{ID: 7, Name: "n1", Addr: "10.0.0.1:7000"}, m)
	require.Equal(t, old, appendMemberRecord(nil, m), "a record without a client address is still format 1")

	m.ClientAddr = "10.0.0.1:7100"
	rec := appendMemberRecord(nil, m)
	require.Equal(t, memberFormat2, rec[0])
	got, err := decodeMemberRecord(7, rec)
	require.NoError(t, err)
	require.Equal(t, m, got)

	for name, bad := range map[string][]byte{
		"unknown format":        append([]byte{3}, old[1:]...),
		"format 2, no addr":     append([]byte{memberFormat2}, old[1:]...),
		"format 2, empty addr":  wirebytes.AppendString(append([]byte{memberFormat2}, old[1:]...), ""),
		"trailing bytes":        append(append([]byte{}, old...), 0),
		"truncated":             old[:len(old)-1],
		"format 2, over length": append(append([]byte{memberFormat2}, old[1:]...), 0x10),
	} {
		_, err := decodeMemberRecord(7, bad)
		require.Error(t, err, name)
	}
}

// confEntry is a ConfChangeV2 entry of one change, with m as context.
func confEntry(t *testing.T, ts *testSM, typ pb.ConfChangeType, id uint64, m *command.Member) *pb.Entry {
	t.Helper()
	cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(id)}}}
	if m != nil {
		ctx, err := command.EncodeMember(m)
		require.NoError(t, err)
		cc.Context = ctx
	}
	data, err := proto.Marshal(cc)
	require.NoError(t, err)
	return &pb.Entry{Index: new(ts.AppliedIndex() + 1), Term: new(ts.term), Type: new(pb.EntryConfChangeV2), Data: data}
}

func memberOf(t *testing.T, ts *testSM, id uint64) (MemberInfo, bool) {
	t.Helper()
	m, ok, err := ts.Member(id)
	require.NoError(t, err)
	return m, ok
}

// A member announces its client address with an UpdateNode of its own
// record: only the client address changes, only for a member the book
// has and under its own name, only a well-formed address; a promotion
// keeps it, a removal drops it with the record.
func TestAddressBookClientAddr(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	cs := &pb.ConfState{Voters: []uint64{1}}
	require.NoError(t, ts.bootstrap(cs, []MemberInfo{{ID: 1, Name: "a", Addr: "a:1"}}))
	apply := func(e *pb.Entry) {
		t.Helper()
		_, err := ts.Apply([]*pb.Entry{e}, nil)
		require.NoError(t, err)
	}
	apply(confEntry(t, ts, pb.ConfChangeUpdateNode, 1, &command.Member{Name: "a", Addr: "elsewhere:1", ClientAddr: "a:2"}))
	m, _ := memberOf(t, ts, 1)
	require.Equal(t, MemberInfo{ID: 1, Name: "a", Addr: "a:1", ClientAddr: "a:2"}, m, "only the client address changes")

	for _, bad := range []*command.Member{
		{Name: "b", ClientAddr: "x:1"},    // another name
		{Name: "a", ClientAddr: "bad x"},  // a space
		{Name: "a", ClientAddr: "\x00:1"}, // a control character
		{Name: "a", ClientAddr: string(make([]byte, MaxClientAddrLen+1))},
	} {
		apply(confEntry(t, ts, pb.ConfChangeUpdateNode, 1, bad))
		got, _ := memberOf(t, ts, 1)
		require.Equal(t, m, got, "refused: %+v", bad)
	}
	apply(confEntry(t, ts, pb.ConfChangeUpdateNode, 9, &command.Member{Name: "z", ClientAddr: "z:2"}))
	_, ok := memberOf(t, ts, 9)
	require.False(t, ok, "an update does not create a member")

	// A learner added, announcing, then promoted in the same batch.
	e1 := confEntry(t, ts, pb.ConfChangeAddLearnerNode, 2, &command.Member{Name: "b", Addr: "b:1"})
	e2 := confEntry(t, ts, pb.ConfChangeUpdateNode, 2, &command.Member{Name: "b", ClientAddr: "b:2"})
	e2.Index = new(e1.GetIndex() + 1)
	e3 := confEntry(t, ts, pb.ConfChangeAddNode, 2, &command.Member{Name: "b", Addr: "b:1"})
	e3.Index = new(e1.GetIndex() + 2)
	_, err := ts.Apply([]*pb.Entry{e1, e2, e3}, nil)
	require.NoError(t, err)
	m2, _ := memberOf(t, ts, 2)
	require.Equal(t, MemberInfo{ID: 2, Name: "b", Addr: "b:1", ClientAddr: "b:2"}, m2, "a promotion keeps the client address")
	book, err := ts.Members()
	require.NoError(t, err)
	require.ElementsMatch(t, []MemberInfo{m, m2}, book)

	// Cleared, it is format 1 again.
	apply(confEntry(t, ts, pb.ConfChangeUpdateNode, 2, &command.Member{Name: "b"}))
	m2, _ = memberOf(t, ts, 2)
	require.Empty(t, m2.ClientAddr)
	apply(confEntry(t, ts, pb.ConfChangeRemoveNode, 2, &command.Member{Name: "b"}))
	_, ok = memberOf(t, ts, 2)
	require.False(t, ok)
	removed, err := ts.WasRemoved(2)
	require.NoError(t, err)
	require.True(t, removed)
	ts.reopen()
	got, _ := memberOf(t, ts, 1)
	require.Equal(t, m, got, "the client address is durable")
}

// An operator moves a member's transport address with an UpdateNode
// naming it in PeerAddr (UpdateMember): only Addr changes (the client
// address stays, whatever the change carries), only for the member the
// book has under that name, only to a well-formed address; a later
// client address announcement, which carries the Addr it had, does not
// move it back; the move is durable.
func TestAddressBookPeerAddr(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	cs := &pb.ConfState{Voters: []uint64{1}}
	require.NoError(t, ts.bootstrap(cs, []MemberInfo{{ID: 1, Name: "a", Addr: "a:1"}}))
	apply := func(m *command.Member) MemberInfo {
		t.Helper()
		_, err := ts.Apply([]*pb.Entry{confEntry(t, ts, pb.ConfChangeUpdateNode, 1, m)}, nil)
		require.NoError(t, err)
		got, ok := memberOf(t, ts, 1)
		require.True(t, ok)
		return got
	}
	apply(&command.Member{Name: "a", ClientAddr: "a:2"})
	moved := apply(&command.Member{Name: "a", Addr: "a:1", ClientAddr: "other:2", PeerAddr: "b:1"})
	require.Equal(t, MemberInfo{ID: 1, Name: "a", Addr: "b:1", ClientAddr: "a:2"}, moved)
	for _, bad := range []*command.Member{
		{Name: "b", PeerAddr: "x:1"},   // another name
		{Name: "a", PeerAddr: "bad x"}, // a space
		{Name: "a", PeerAddr: string(make([]byte, MaxClientAddrLen+1))},
	} {
		require.Equal(t, moved, apply(bad), "refused: %+v", bad)
	}
	stale := apply(&command.Member{Name: "a", Addr: "a:1", ClientAddr: "a:3"})
	require.Equal(t, MemberInfo{ID: 1, Name: "a", Addr: "b:1", ClientAddr: "a:3"}, stale, "an announcement moves no address")
	ts.reopen()
	got, _ := memberOf(t, ts, 1)
	require.Equal(t, stale, got, "the move is durable")
}
