package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// fillSM gives ts some of everything: keys, ephemeral keys, sessions, and
// history.
func fillSM(t *testing.T, ts *testSM, n int) {
	t.Helper()
	sid := ts.newSession()
	for i := range n {
		ts.txn(command.Txn{Then: []command.Op{
			putOp(fmt.Sprintf("key/%04d", i), fmt.Sprintf("value %d", i)),
			ephemeralPut(fmt.Sprintf("eph/%04d", i%10), "e", sid),
		}})
	}
	ts.newSession()
}

// transfer streams the snapshot snap of from into to's staging, the way
// the transport does: the last chunk is known by reading one ahead.
func transfer(t *testing.T, from, to *testSM, snap *pb.Snapshot) int {
	t.Helper()
	return transferSM(t, from.StateMachine, to.StateMachine, snap)
}

func transferSM(t *testing.T, from, to *StateMachine, snap *pb.Snapshot) int {
	t.Helper()
	index, term := snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
	r, ok := from.OpenSnapshot(index)
	require.True(t, ok)
	defer func() { require.NoError(t, r.Close()) }()
	chunk, err := r.Next()
	require.NoError(t, err)
	seq := 0
	for {
		next, err := r.Next()
		last := errors.Is(err, io.EOF)
		if !last {
			require.NoError(t, err)
		}
		require.NoError(t, to.StageChunk(index, term, seq, chunk, last))
		require.Equal(t, last, to.StagedComplete(index, term))
		seq++
		if last {
			return seq
		}
		chunk = next
	}
}

// install installs the staged snapshot as Store.InstallSnapshot does.
func install(t *testing.T, ts *testSM, snap *pb.Snapshot) {
	t.Helper()
	inst, err := ts.prepareInstall(snap)
	require.NoError(t, err)
	defer inst.discard()
	require.NoError(t, inst.commit())
	ts.afterInstall(snap)
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	a := openTestSM(t, nil, Options{HistoryRevisions: 30})
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	require.NoError(t, a.bootstrap(cs, nil))
	fillSM(t, a, 60)
	a.chunkSize = 512 // many chunks

	snap, err := a.snapshot()
	require.NoError(t, err)
	require.Equal(t, a.AppliedIndex(), snap.GetMetadata().GetIndex())
	require.EqualValues(t, 1, snap.GetMetadata().GetTerm())
	require.Equal(t, cs.GetVoters(), snap.GetMetadata().GetConfState().GetVoters())
	atSnap := a.dump()
	rev, oldest := a.Revision(), a.OldestRevision()
	require.Greater(t, oldest, int64(1), "history was pruned")

	// The snapshot is of its instant: later applies do not show in it.
	later := []*command.Command{
		txnCmd(command.Txn{Then: []command.Op{putOp("after", "1"), delPrefix("key/00")}}),
		{Kind: command.KindSessionEnd, Session: &command.Session{ID: 1}},
	}
	a.apply(later...)

	// The receiver had a state of its own, and a stale partial staging.
	b := openTestSM(t, nil, Options{HistoryRevisions: 30})
	fillSM(t, b, 5)
	b.put("only/on/b", "x")
	require.NoError(t, b.StageChunk(99, 9, 0, []byte{chunkFormat1, 2, 0x11, 'z', 0}, false))

	chunks := transfer(t, a, b, snap)
	require.Greater(t, chunks, 5)
	install(t, b, snap)

	require.Equal(t, atSnap, b.dump())
	require.Empty(t, dumpRange(t, b.image(), prefixStaging, prefixStaging+1))
	requireNoStagedFiles(t, b)
	require.Equal(t, snap.GetMetadata().GetIndex(), b.AppliedIndex())
	require.Equal(t, rev, b.Revision())
	require.Equal(t, oldest, b.OldestRevision())
	require.Equal(t, cs.GetVoters(), b.ConfState().GetVoters())
	require.False(t, b.StagedComplete(snap.GetMetadata().GetIndex(), 1), "staging is reset")
	_, ok, err := b.Get("only/on/b")
	require.NoError(t, err)
	require.False(t, ok)

	// The follower goes on from the snapshot exactly as the leader did.
	out, err := b.Apply(a.entriesAt(snap.GetMetadata().GetIndex()+1, later...), nil)
	require.NoError(t, err)
	require.Len(t, out.Changes, 2)
	require.Equal(t, a.dump(), b.dump())
	require.Equal(t, a.cur, b.cur)
	hist, err := b.History(rev, 0)
	require.NoError(t, err)
	require.Len(t, hist, 2)

	// And its state survives a restart.
	b.reopen()
	require.Equal(t, a.dump(), b.dump())
	require.Equal(t, a.cur, b.cur)
}

func requireNoStagedFiles(t *testing.T, ts *testSM) {
	t.Helper()
	for _, name := range []string{stagedBodyFile, stagedMetaFile} {
		_, err := ts.fs.Stat(ts.fs.PathJoin(smTestDir, name))
		require.ErrorIs(t, err, os.ErrNotExist, name)
	}
}

// TestSnapshotStagingLeftByCrashRemoved: a staging is never resumed, so
// what a crash leaves of its tables (and of the staged pairs of the
// versions before them) goes when the store opens.
func TestSnapshotStagingLeftByCrashRemoved(t *testing.T) {
	t.Parallel()
	a := openTestSM(t, nil, Options{})
	require.NoError(t, a.bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	fillSM(t, a, 20)
	a.chunkSize = 256
	snap, err := a.snapshot()
	require.NoError(t, err)
	index, term := snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
	r, ok := a.OpenSnapshot(index)
	require.True(t, ok)
	defer r.Close()

	b := openTestSM(t, nil, Options{})
	b.put("mine", "x")
	before := b.dump()
	for seq := range 3 {
		chunk, err := r.Next()
		require.NoError(t, err)
		require.NoError(t, b.StageChunk(index, term, seq, chunk, false))
	}
	require.NoError(t, b.image().Set([]byte{prefixStaging, prefixKV, 'o', 'l', 'd'}, []byte("v"), nil))
	// Closing drops the staging; a crash leaves its tables, as here.
	b.close()
	requireNoStagedFiles(t, b)
	for _, name := range []string{stagedBodyFile, stagedMetaFile} {
		f, err := b.fs.Create(b.fs.PathJoin(smTestDir, name), vfs.WriteCategoryUnspecified)
		require.NoError(t, err)
		_, err = f.Write([]byte("a table cut short"))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	b.open()
	requireNoStagedFiles(t, b)
	require.Empty(t, dumpRange(t, b.image(), prefixStaging, prefixStaging+1))
	require.Equal(t, before, b.dump())
	require.False(t, b.StagedComplete(index, term))
}

// entriesAt is entries numbered from index on.
func (ts *testSM) entriesAt(index uint64, cmds ...*command.Command) []*pb.Entry {
	ents := ts.entries(cmds...)
	for i, e := range ents {
		e.Index = new(index + uint64(i))
	}
	return ents
}

func TestSnapshotUnavailableBeforeFirstApply(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	_, err := ts.snapshot()
	require.ErrorIs(t, err, raft.ErrSnapshotTemporarilyUnavailable)
	require.NoError(t, ts.bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	_, err = ts.snapshot()
	require.ErrorIs(t, err, raft.ErrSnapshotTemporarilyUnavailable)
	_, ok := ts.OpenSnapshot(0)
	require.False(t, ok)
}

func TestSnapshotChunksRejected(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	before := ts.dump()
	pair := func(key string, val string) []byte {
		b := binary.AppendUvarint(nil, uint64(len(key)))
		b = append(b, key...)
		b = binary.AppendUvarint(b, uint64(len(val)))
		return append(b, val...)
	}
	good := append([]byte{chunkFormat1}, pair("\x11k", "v")...)
	later := append([]byte{chunkFormat1}, pair("\x11l", "v")...)

	for name, data := range map[string][]byte{
		"empty":           nil,
		"unknown format":  append([]byte{9}, pair("\x11k", "v")...),
		"truncated key":   {chunkFormat1, 5, 0x11, 'k'},
		"truncated value": append(append([]byte{chunkFormat1}, pair("\x11k", "v")...), 2, 0x11, 'x', 4, 'a'),
		"bad varint":      {chunkFormat1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"huge length":     {chunkFormat1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"empty key":       append([]byte{chunkFormat1}, pair("", "v")...),
		"raft log key":    append([]byte{chunkFormat1}, pair("\x01\x00\x00\x00\x00\x00\x00\x00\x01", "entry")...),
		"staging key":     append([]byte{chunkFormat1}, pair("\x03\x11k", "v")...),
		"past the state":  append([]byte{chunkFormat1}, pair("\x16", "v")...),
	} {
		err := ts.StageChunk(5, 1, 0, data, true)
		require.ErrorIs(t, err, ErrSnapshotChunk, name)
		require.False(t, ts.StagedComplete(5, 1), name)
	}
	require.ErrorIs(t, ts.StageChunk(5, 1, 0, []byte{9}, true), ErrFormat, "an unknown format says so")
	require.Empty(t, dumpRange(t, ts.image(), prefixStaging, prefixStaging+1))

	// Out of order, or of another snapshot.
	require.ErrorIs(t, ts.StageChunk(5, 1, 1, good, false), ErrSnapshotChunk, "nothing staged yet")
	require.NoError(t, ts.StageChunk(5, 1, 0, good, false))
	require.ErrorIs(t, ts.StageChunk(5, 1, 2, good, false), ErrSnapshotChunk, "skipped a chunk")
	require.ErrorIs(t, ts.StageChunk(5, 1, -1, good, false), ErrSnapshotChunk, "negative")
	require.ErrorIs(t, ts.StageChunk(6, 1, 1, good, false), ErrSnapshotChunk, "other index")
	require.ErrorIs(t, ts.StageChunk(5, 2, 1, good, false), ErrSnapshotChunk, "other term")
	require.ErrorIs(t, ts.StageChunk(5, 1, 1, good, false), ErrSnapshotChunk, "a key again")
	require.ErrorIs(t, ts.StageChunk(5, 1, 1, append([]byte{chunkFormat1}, pair("\x11a", "v")...), false),
		ErrSnapshotChunk, "a key before the last")
	require.ErrorIs(t, ts.StageChunk(5, 1, 1, append(append([]byte{chunkFormat1}, pair("\x11m", "v")...), pair("\x11l", "v")...), false),
		ErrSnapshotChunk, "keys out of order in a chunk")
	require.NoError(t, ts.StageChunk(5, 1, 1, later, true))
	require.True(t, ts.StagedComplete(5, 1))
	require.False(t, ts.StagedComplete(5, 2))
	require.ErrorIs(t, ts.StageChunk(5, 1, 2, good, false), ErrSnapshotChunk, "after the last")

	// Installing needs the complete staging of that very snapshot, and a
	// staged state that matches its metadata.
	snap := &pb.Snapshot{
		Data:     []byte{snapDataFormat1, 0},
		Metadata: &pb.SnapshotMetadata{Index: new(uint64(6)), Term: new(uint64(1))},
	}
	_, err := ts.prepareInstall(snap)
	require.ErrorIs(t, err, ErrSnapshotIncomplete)
	snap.Metadata.Index = new(uint64(5))
	_, err = ts.prepareInstall(snap)
	require.ErrorIs(t, err, ErrCorrupt, "no applied state staged")
	snap.Data = []byte{7}
	_, err = ts.prepareInstall(snap)
	require.ErrorIs(t, err, ErrFormat)
	require.Equal(t, before, ts.dump(), "rejected chunks and installs change nothing")

	// Random bytes never panic.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		data := make([]byte, rng.IntN(40))
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		if rng.IntN(2) == 0 && len(data) > 0 {
			data[0] = chunkFormat1
		}
		_ = ts.StageChunk(1, 1, 0, data, true)
	}
	require.Equal(t, before, ts.dump())
}

func TestSnapshotStagedStateMustMatchMetadata(t *testing.T) {
	t.Parallel()
	a := openTestSM(t, nil, Options{})
	require.NoError(t, a.bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	fillSM(t, a, 3)
	snap, err := a.snapshot()
	require.NoError(t, err)
	b := openTestSM(t, nil, Options{})
	transfer(t, a, b, snap)

	// Metadata claiming another revision than the staged state's.
	bad := &pb.Snapshot{Data: []byte{snapDataFormat1, 100}, Metadata: snap.GetMetadata()}
	_, err = b.prepareInstall(bad)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Empty(t, b.dump())
	install(t, b, snap)
	require.Equal(t, a.dump(), b.dump())
}

func TestSnapshotHeldSnapshots(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	var indexes []uint64
	for i := range maxHeldSnapshots + 2 {
		ts.put("k", fmt.Sprint(i))
		snap, err := ts.snapshot()
		require.NoError(t, err)
		indexes = append(indexes, snap.GetMetadata().GetIndex())
	}
	// The oldest were closed; the newest are held.
	for i, idx := range indexes {
		r, ok := ts.OpenSnapshot(idx)
		require.Equal(t, i >= 2, ok, "index %d", idx)
		if ok {
			require.NoError(t, r.Close())
		}
	}
	// Closing a reader releases its snapshot.
	_, ok := ts.OpenSnapshot(indexes[2])
	require.False(t, ok)

	// A reader outlives the eviction of its snapshot, and the state
	// machine's close releases readers never closed.
	snap, err := ts.snapshot()
	require.NoError(t, err)
	r, ok := ts.OpenSnapshot(snap.GetMetadata().GetIndex())
	require.True(t, ok)
	r2, ok := ts.OpenSnapshot(snap.GetMetadata().GetIndex())
	require.True(t, ok)
	for range maxHeldSnapshots {
		ts.put("k", "more")
		_, err := ts.snapshot()
		require.NoError(t, err)
	}
	chunk, err := r.Next()
	require.NoError(t, err)
	require.Contains(t, string(chunk), "\x11k")
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close())

	ts.StateMachine.close()
	_, err = r2.Next()
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, r2.Close())
}

// TestSnapshotOversizedPair checks that a pair larger than the chunk bound
// still travels, alone in its chunk.
func TestSnapshotOversizedPair(t *testing.T) {
	t.Parallel()
	a := openTestSM(t, nil, Options{})
	require.NoError(t, a.bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	a.put("small", "s")
	a.put("big", string(make([]byte, 3000)))
	a.chunkSize = 1000
	snap, err := a.snapshot()
	require.NoError(t, err)
	b := openTestSM(t, nil, Options{})
	require.Greater(t, transfer(t, a, b, snap), 2)
	install(t, b, snap)
	require.Equal(t, a.dump(), b.dump())
}

// TestSMStoreInstallSnapshot runs a snapshot through the Store: taken by
// the leader's RaftLog, installed by the follower's InstallSnapshot, and
// still there after the follower restarts.
func TestSMStoreInstallSnapshot(t *testing.T) {
	t.Parallel()
	leader, err := Open(Options{})
	require.NoError(t, err)
	defer leader.Close()
	require.NoError(t, leader.Bootstrap(&pb.ConfState{Voters: []uint64{1, 2}}, nil))
	lsm := leader.StateMachine()
	var ents []*pb.Entry
	// Bootstrap is a snapshot at index 1: the log starts at 2.
	for i := range 19 {
		data, err := command.Encode(txnCmd(command.Txn{Then: []command.Op{putOp(fmt.Sprint("k", i), "v")}}))
		require.NoError(t, err)
		ents = append(ents, &pb.Entry{Index: new(uint64(i + 2)), Term: new(uint64(3)), Data: data})
	}
	require.NoError(t, leader.RaftLog().Append(&pb.HardState{Term: new(uint64(3)), Commit: new(uint64(20))}, ents, true))
	_, err = lsm.Apply(ents, nil)
	require.NoError(t, err)
	snap, err := leader.RaftLog().Snapshot()
	require.NoError(t, err)
	require.EqualValues(t, 20, snap.GetMetadata().GetIndex())
	require.EqualValues(t, 3, snap.GetMetadata().GetTerm())

	disk := NewMemDisk()
	follower, err := Open(Options{Disk: disk})
	require.NoError(t, err)
	require.True(t, follower.IsNew())
	transferSM(t, lsm, follower.StateMachine(), snap)
	require.NoError(t, follower.InstallSnapshot(snap))
	want := dumpRange(t, leader.db, prefixStateFirst, prefixStateEnd)
	require.Equal(t, want, dumpRange(t, follower.db, prefixStateFirst, prefixStateEnd))
	require.False(t, follower.IsNew())
	first, err := follower.RaftLog().FirstIndex()
	require.NoError(t, err)
	require.EqualValues(t, 21, first)
	require.EqualValues(t, 20, follower.StateMachine().AppliedIndex())
	require.NoError(t, follower.Close())

	follower, err = Open(Options{Disk: disk.Crash(nil)})
	require.NoError(t, err)
	defer follower.Close()
	require.Equal(t, want, dumpRange(t, follower.db, prefixStateFirst, prefixStateEnd))
	_, cs, err := follower.RaftLog().InitialState()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, cs.GetVoters())
	kv, ok, err := follower.StateMachine().Get("k7")
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 8, kv.ModRev)
}
