package raftnode

import (
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

func entry(t *testing.T, c *command.Command) *pb.Entry {
	t.Helper()
	data, err := command.Encode(c)
	require.NoError(t, err)
	return &pb.Entry{Type: pb.EntryNormal.Enum(), Data: data}
}

// Only small batches of commands whose cost their size bounds are
// applied on the raft goroutine; anything else goes to the apply loop, so
// heartbeats are not held up behind it.
func TestInlineable(t *testing.T) {
	put := &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{{Type: command.OpPut, Key: "k", Value: []byte("v")}}}}
	delPrefix := &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{{Type: command.OpDelete, Key: "p/", Prefix: true}}}}
	end := &command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: 7}}
	noop := &pb.Entry{Type: pb.EntryNormal.Enum()} // a new leader's empty entry

	require.True(t, inlineable(applyJob{ents: []*pb.Entry{entry(t, put), noop, entry(t, put)}}))
	require.False(t, inlineable(applyJob{ents: []*pb.Entry{entry(t, put), entry(t, delPrefix)}}), "a prefix delete may touch any number of keys")
	require.False(t, inlineable(applyJob{ents: []*pb.Entry{entry(t, end)}}), "a session's end deletes all its keys")
	require.False(t, inlineable(applyJob{ents: []*pb.Entry{entry(t, put)}, cs: &pb.ConfState{}}), "conf changes go the usual way")
	require.False(t, inlineable(applyJob{ents: []*pb.Entry{{Type: pb.EntryConfChangeV2.Enum()}}}))
	require.False(t, inlineable(applyJob{snap: &pb.Snapshot{}}), "snapshots and barriers are the apply loop's")

	many := make([]*pb.Entry, inlineMaxEntries+1)
	for i := range many {
		many[i] = noop
	}
	require.False(t, inlineable(applyJob{ents: many}))
	big := &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{{Type: command.OpPut, Key: "k", Value: make([]byte, inlineMaxBytes/2)}}}}
	require.True(t, inlineable(applyJob{ents: []*pb.Entry{entry(t, big)}}))
	require.False(t, inlineable(applyJob{ents: []*pb.Entry{entry(t, big), entry(t, big)}}), "past the byte bound")
}
