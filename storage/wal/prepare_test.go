package wal

import (
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// appendEntries appends n entries of size bytes after the log's last.
func appendEntries(t *testing.T, l *Log, n, size int) {
	t.Helper()
	for range n {
		i := l.LastIndex() + 1
		e := &pb.Entry{Index: new(i), Term: new(uint64(1)), Data: make([]byte, size)}
		require.NoError(t, l.Append(nil, []*pb.Entry{e}, false))
	}
}

// waitPrepared waits until the next segment is prepared.
func waitPrepared(t *testing.T, l *Log) {
	t.Helper()
	require.Eventually(t, func() bool { return len(l.prep.ready) == 1 }, 30*time.Second, time.Millisecond)
}

// Segments are prepared off the append path: a cut that finds the next
// one ready renames it into place and writes only its header, so no cut
// holds the commits for a segment's zeros (issue: every 32 MiB of log
// stalled the member's commits).
func TestCutsTakePreparedSegments(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l, err := Open(Options{FS: fs, Dir: "wal", SegmentBytes: 64 << 10})
	require.NoError(t, err)
	defer l.Close()
	for range 4 {
		waitPrepared(t, l)
		cuts := l.Stats().Cuts
		for l.Stats().Cuts == cuts {
			appendEntries(t, l, 1, 1000)
		}
	}
	st := l.Stats()
	require.GreaterOrEqual(t, st.Cuts, uint64(4))
	require.Zero(t, st.InlineCuts, "a cut filled its segment on the append path")
	require.NoError(t, l.Sync())
	last := l.LastIndex()
	require.NoError(t, l.Close())

	// The prepared file is no segment: the log reopens whole, and Open
	// removes the file and prepares afresh.
	names, err := fs.List("wal")
	require.NoError(t, err)
	require.NotContains(t, names, preparedName, "Close removes it")
	l, err = Open(Options{FS: fs, Dir: "wal", SegmentBytes: 64 << 10})
	require.NoError(t, err)
	require.Equal(t, last, l.LastIndex())
	require.NoError(t, l.Close())
}

// A cut that finds nothing ready fills inline, and says so.
func TestCutWithoutPreparedSegmentFillsInline(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	l, err := Open(Options{FS: fs, Dir: "wal", SegmentBytes: 64 << 10})
	require.NoError(t, err)
	defer l.Close()
	waitPrepared(t, l)
	<-l.prep.ready // as if it were not done yet
	cuts := l.Stats().Cuts
	for l.Stats().Cuts == cuts {
		appendEntries(t, l, 1, 1000)
	}
	require.EqualValues(t, 1, l.Stats().InlineCuts)
}

// A crash may leave a prepared file, or a renamed one without its header
// (zeros only, under the next segment's name): both are what a crash in
// the middle of an inline cut left before, and the log reopens with every
// synced entry.
func TestCrashAroundACutKeepsTheLog(t *testing.T) {
	t.Parallel()
	fs := vfs.NewCrashableMem()
	l, err := Open(Options{FS: fs, Dir: "wal", SegmentBytes: 64 << 10})
	require.NoError(t, err)
	appendEntries(t, l, 10, 1000)
	require.NoError(t, l.Sync())
	last := l.LastIndex()
	waitPrepared(t, l)
	// A renamed prepared segment whose header never came.
	require.NoError(t, fs.Rename(fs.PathJoin("wal", preparedName), fs.PathJoin("wal", segmentName(l.tail.seq+1))))
	dir, err := fs.OpenDir("wal")
	require.NoError(t, err)
	require.NoError(t, dir.Sync())
	require.NoError(t, dir.Close())
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	<-l.prep.ready // the file moved: the log must not take it
	require.NoError(t, l.Close())

	l, err = Open(Options{FS: crashed, Dir: "wal", SegmentBytes: 64 << 10})
	require.NoError(t, err)
	require.Equal(t, last, l.LastIndex())
	appendEntries(t, l, 200, 1000) // and it goes on cutting
	require.NoError(t, l.Close())
}

// unsyncedFS records the most bytes the prepared segment ever had
// written and not yet synced.
type unsyncedFS struct {
	vfs.FS
	mu       sync.Mutex
	unsynced int64
	most     int64
}

func (fs *unsyncedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || fs.PathBase(name) != preparedName {
		return f, err
	}
	return &unsyncedFile{File: f, fs: fs}, nil
}

type unsyncedFile struct {
	vfs.File
	fs *unsyncedFS
}

func (f *unsyncedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.fs.mu.Lock()
	f.fs.unsynced += int64(n)
	f.fs.most = max(f.fs.most, f.fs.unsynced)
	f.fs.mu.Unlock()
	return n, err
}

func (f *unsyncedFile) synced() {
	f.fs.mu.Lock()
	f.fs.unsynced = 0
	f.fs.mu.Unlock()
}

func (f *unsyncedFile) Sync() error     { defer f.synced(); return f.File.Sync() }
func (f *unsyncedFile) SyncData() error { defer f.synced(); return f.File.SyncData() }

// The preparer syncs its zeros a chunk at a time: left to one sync at
// the end (or to the kernel's writeback), a segment's 32 MiB reach the
// disk in one burst, and the log's fdatasyncs wait behind it (the soak's
// first minutes).
func TestPreparedZerosReachTheDiskAChunkAtATime(t *testing.T) {
	t.Parallel()
	fs := &unsyncedFS{FS: vfs.NewMem()}
	l, err := Open(Options{FS: fs, Dir: "wal", SegmentBytes: 4 * fillChunk})
	require.NoError(t, err)
	defer l.Close()
	waitPrepared(t, l)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	require.NotZero(t, fs.most, "no segment prepared through the file")
	require.LessOrEqual(t, fs.most, int64(fillChunk), "bytes of a prepared segment written and not synced")
}
