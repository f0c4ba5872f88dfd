package raftnode

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestSequentialProposalsDropNothing: a single caller's proposals, one
// after another through the leader and through a follower, are never
// refused by a peer's checks. With persisting off the stepping path, a
// follower's acknowledgement often arrives before the leader's own write
// (holdEarlyAck); refused, it is repaired only by the next heartbeat
// round, a stall of a heartbeat interval per put (12 of 400 puts before
// the fix). Run it with both persist modes (persistMode).
func TestSequentialProposalsDropNothing(t *testing.T) {
	c := newTestCell(t, 3, nil)
	lead := c.leader()
	follower := (lead + 1) % 3
	for i := range 200 {
		c.put(lead, fmt.Sprintf("l%d", i%16), "v")
		c.put(follower, fmt.Sprintf("f%d", i%16), "v")
	}
	for i, n := range c.nodes {
		require.Zero(t, n.Status().Dropped, "member %d refused messages", i)
	}
}

// TestMergedAppendsLeaveTheSameLog: a batch's appends written as one
// (mergeAppends) leave exactly the log and hard state that writing them
// one by one does, including appends that start at or before the end of
// the run so far and so replace its tail (a new leader's entries), and
// hard-state-only appends. Randomized; the seed is printed.
func TestMergedAppendsLeaveTheSameLog(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	open := func() *storage.Store {
		st, err := storage.Open(storage.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		require.NoError(t, st.Bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
		return st
	}
	oneByOne, merged := open(), open()
	var model []uint64 // terms of entries 2, 3, ...
	term, vote := uint64(1), uint64(0)
	var buf []*pb.Entry
	for round := range 300 {
		var batch []persistItem
		for range 1 + rng.IntN(6) {
			m := &pb.Message{Type: pb.MsgStorageAppend.Enum()}
			if rng.IntN(3) == 0 {
				term += uint64(rng.IntN(2))
				vote = uint64(rng.IntN(4))
				m.Term, m.Vote, m.Commit = new(term), new(vote), new(uint64(1))
			}
			if rng.IntN(5) > 0 {
				// Start anywhere from a few entries back to just after
				// the end; never before the bootstrap entry.
				last := uint64(len(model)) + 1
				first := max(2, last-min(last, uint64(rng.IntN(5)))) + uint64(rng.IntN(2))
				first = min(first, last+1)
				if rng.IntN(3) == 0 {
					term++ // a new leader's entries
				}
				model = model[:first-2]
				for i := range uint64(1 + rng.IntN(4)) {
					idx := first + i
					m.Entries = append(m.Entries, &pb.Entry{Index: new(idx), Term: new(term),
						Data: fmt.Appendf(nil, "r%d-%d", round, idx)})
					model = append(model, term)
				}
			}
			if m.Term == nil && len(m.Entries) == 0 {
				continue
			}
			batch = append(batch, persistItem{m: m})
		}
		for i, it := range batch {
			require.NoError(t, oneByOne.Append(hardStateOf(it.m), it.m.GetEntries(), i == len(batch)-1))
		}
		hs, ents, wrote, err := mergeAppends(buf[:0], batch)
		require.NoError(t, err)
		buf = ents
		if wrote {
			require.NoError(t, merged.Append(hs, ents, true))
		}
		clear(ents)
		want := uint64(len(model)) + 1
		for _, st := range []*storage.Store{oneByOne, merged} {
			last, err := st.RaftLog().LastIndex()
			require.NoError(t, err)
			require.Equal(t, want, last, "round %d", round)
		}
		if len(model) == 0 {
			continue // hard states only so far: no entries to compare
		}
		a, err := oneByOne.RaftLog().Entries(2, want+1, math.MaxUint64)
		require.NoError(t, err)
		b, err := merged.RaftLog().Entries(2, want+1, math.MaxUint64)
		require.NoError(t, err)
		require.Len(t, b, len(model))
		for i := range a {
			require.True(t, proto.Equal(a[i], b[i]), "round %d: entry %d: %v against %v", round, i+2, a[i], b[i])
			require.Equal(t, model[i], b[i].GetTerm(), "round %d: entry %d", round, i+2)
		}
		hsA, _, err := oneByOne.RaftLog().InitialState()
		require.NoError(t, err)
		hsB, _, err := merged.RaftLog().InitialState()
		require.NoError(t, err)
		require.True(t, proto.Equal(hsA, hsB), "round %d: hard state %v against %v", round, hsA, hsB)
	}
}

// TestMergeAppendsRefusesAGap: Raft never asks for an append that leaves
// a hole; a batch that would is an error, not a silently broken log.
func TestMergeAppendsRefusesAGap(t *testing.T) {
	ent := func(i uint64) *pb.Entry { return &pb.Entry{Index: new(i), Term: new(uint64(1))} }
	batch := []persistItem{
		{m: &pb.Message{Entries: []*pb.Entry{ent(2), ent(3)}}},
		{m: &pb.Message{Entries: []*pb.Entry{ent(5)}}},
	}
	_, _, _, err := mergeAppends(nil, batch)
	require.ErrorIs(t, err, errAppendGap)
}

// TestDropCoveredAcks: of a peer's acceptances in one term only the
// highest goes out; rejections, other terms, other peers and other kinds
// of message all go, in order.
func TestDropCoveredAcks(t *testing.T) {
	ack := func(to, term, idx uint64, reject bool) *pb.Message {
		return &pb.Message{Type: pb.MsgAppResp.Enum(), To: new(to), Term: new(term), Index: new(idx), Reject: new(reject)}
	}
	vote := &pb.Message{Type: pb.MsgVoteResp.Enum(), To: new(uint64(2)), Term: new(uint64(3))}
	msgs := []*pb.Message{
		ack(2, 3, 5, false), // covered by 7
		ack(3, 3, 5, false), // another peer
		ack(2, 3, 6, true),  // a rejection
		vote,
		ack(2, 2, 9, false), // an older term
		ack(2, 3, 7, false),
		ack(2, 3, 7, false), // the same again: the first of the two goes
	}
	got := dropCoveredAcks(slices.Clone(msgs))
	require.Equal(t, []*pb.Message{msgs[1], msgs[2], msgs[3], msgs[4], msgs[6]}, got)
}
