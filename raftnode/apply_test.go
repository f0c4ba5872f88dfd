package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	t.Parallel()
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

// TestInlineApplyReadsBounded: a batch whose transactions read more than
// the raft goroutine may (inlineMaxReads) goes to the apply loop, whole,
// with every command's outcome as it would have been; small reads stay
// inline.
func TestInlineApplyReadsBounded(t *testing.T) {
	t.Parallel()
	// A long tick: an inline apply slower than a tick (a busy machine)
	// would send the batches after it to the apply loop for a while, and
	// this test counts what the raft goroutine does.
	c := newTestCell(t, 1, func(cfg *Config) { cfg.TickInterval, cfg.ElectionTicks = 500*time.Millisecond, 2 })
	c.leader()
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	value := make([]byte, 4<<10)
	keys := 2 * inlineMaxReads / len(value) / 100 * 100
	for i := 0; i < keys; i += 100 {
		var ops []command.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, command.Op{Type: command.OpPut, Key: fmt.Sprintf("big/%05d", j), Value: value})
		}
		_, err := n.Propose(ctx, &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: ops}})
		require.NoError(t, err)
	}
	read := func(prefix string) *command.Command {
		return &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{
			{Type: command.OpPut, Key: "w/" + prefix, Value: []byte("x")},
			{Type: command.OpGet, Key: prefix, Prefix: true},
		}}}
	}
	before := n.Metrics().InlineOverBudget
	res, err := n.Propose(ctx, read("big/0000"))
	require.NoError(t, err)
	require.Equal(t, 10, len(res.Ops[1].KVs))
	require.Equal(t, before, n.Metrics().InlineOverBudget, "a small read handed over")

	res, err = n.Propose(ctx, read("big/"))
	require.NoError(t, err)
	require.Equal(t, keys, len(res.Ops[1].KVs))
	require.Equal(t, before+1, n.Metrics().InlineOverBudget, "a large read applied on the raft goroutine")
}
