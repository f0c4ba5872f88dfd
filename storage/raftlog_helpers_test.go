package storage

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/coordcell/coord/storage/wal"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// fakeSource stands in for the state machine: RaftLog only asks it for
// the conf state and a snapshot.
type fakeSource struct {
	cs   *pb.ConfState
	snap *pb.Snapshot
}

func (f *fakeSource) ConfState() *pb.ConfState        { return f.cs }
func (f *fakeSource) snapshot() (*pb.Snapshot, error) { return f.snap, nil }

// testLog is a RaftLog on its own WAL, on an in-memory file system that
// survives reopen (and, if crashable, a simulated crash).
type testLog struct {
	*RaftLog
	t    testing.TB
	fs   *vfs.MemFS
	w    *wal.Log
	opts Options
	src  *fakeSource
}

const testDBDir = "/db"

// openTestLog opens (or creates) a log on fs; nil fs = a fresh MemFS.
// The log is closed when the test ends.
func openTestLog(t testing.TB, fs *vfs.MemFS, opts Options) *testLog {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	tl := &testLog{t: t, fs: fs, opts: opts, src: &fakeSource{}}
	tl.open()
	t.Cleanup(tl.close)
	return tl
}

func (tl *testLog) open() {
	tl.t.Helper()
	// Small segments, so that tests cross segment boundaries.
	w, err := wal.Open(wal.Options{FS: tl.fs, Dir: testDBDir, SegmentBytes: 64 << 10})
	require.NoError(tl.t, err)
	tl.w, tl.RaftLog = w, newRaftLog(w, &tl.opts, tl.src, nil)
}

func (tl *testLog) close() {
	if tl.w != nil {
		require.NoError(tl.t, tl.w.Close())
		tl.w, tl.RaftLog = nil, nil
	}
}

// reopen closes the log and opens it again from what is on tl.fs.
func (tl *testLog) reopen() {
	tl.t.Helper()
	tl.close()
	tl.open()
}

// resetLog installs a snapshot at (index, term) the way Store does.
func (tl *testLog) resetLog(index, term uint64) {
	tl.t.Helper()
	meta := &pb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: &pb.ConfState{}}
	require.NoError(tl.t, tl.RaftLog.reset(meta, nil))
}

// logWith returns a log shaped like raft's storage tests' MemoryStorage
// {ents: ents}: ents[0] is the truncation point (index and term only),
// the rest are the entries.
func logWith(t testing.TB, opts Options, ents []*pb.Entry) *testLog {
	t.Helper()
	tl := openTestLog(t, nil, opts)
	if idx := ents[0].GetIndex(); idx > 0 {
		tl.resetLog(idx, ents[0].GetTerm())
	}
	if len(ents) > 1 {
		require.NoError(t, tl.Append(nil, ents[1:], true))
	}
	return tl
}

// memWith is the raft.MemoryStorage equivalent of logWith.
func memWith(t testing.TB, ents []*pb.Entry) *raft.MemoryStorage {
	t.Helper()
	ms := raft.NewMemoryStorage()
	if idx := ents[0].GetIndex(); idx > 0 {
		require.NoError(t, ms.ApplySnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{
			Index: new(idx), Term: new(ents[0].GetTerm()), ConfState: &pb.ConfState{},
		}}))
	}
	require.NoError(t, ms.Append(ents[1:]))
	return ms
}

// index(i).terms(t...) builds entries i, i+1, ... with the given terms,
// as in raft's own tests.
type index uint64

func (i index) terms(terms ...uint64) []*pb.Entry {
	ents := make([]*pb.Entry, len(terms))
	for k, term := range terms {
		ents[k] = &pb.Entry{Index: new(uint64(i) + uint64(k)), Term: new(term)}
	}
	return ents
}

// withData gives every entry a payload of n bytes, so sizes matter.
func withData(ents []*pb.Entry, n int) []*pb.Entry {
	for _, e := range ents {
		data := make([]byte, n)
		for k := range data {
			data[k] = byte(e.GetIndex() + uint64(k))
		}
		e.Data = data
		e.Type = pb.EntryNormal.Enum()
	}
	return ents
}

func sizeOf(ents ...*pb.Entry) uint64 {
	var n uint64
	for _, e := range ents {
		n += uint64(proto.Size(e))
	}
	return n
}

func requireEqualEntries(t testing.TB, want, got []*pb.Entry) {
	t.Helper()
	require.Equal(t, len(want), len(got), "want %s, got %s", entString(want), entString(got))
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "entry %d: want %v, got %v", i, want[i], got[i])
	}
}

func entString(ents []*pb.Entry) string {
	s := "["
	for i, e := range ents {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d/%d", e.GetIndex(), e.GetTerm())
	}
	return s + "]"
}

// requireSentinel checks err is exactly want (or both nil): raft compares
// storage errors with ==, so a wrapped ErrCompacted would make it panic.
func requireSentinel(t testing.TB, want, err error, msgAndArgs ...any) {
	t.Helper()
	if err != want { //nolint:errorlint // identity is the point
		require.Fail(t, fmt.Sprintf("error: want %v, got %v", want, err), msgAndArgs...)
	}
}
