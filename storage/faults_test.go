package storage

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// faultRecorder is an Options.OnFault that remembers every call.
type faultRecorder struct {
	mu    sync.Mutex
	errs  []error
	fired chan struct{}
}

func newFaultRecorder() *faultRecorder { return &faultRecorder{fired: make(chan struct{})} }

func (r *faultRecorder) hook(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
	if len(r.errs) == 1 {
		close(r.fired)
	}
}

// wait returns the first fault, failing the test if none comes in a
// generous time (the machine may be busy).
func (r *faultRecorder) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.fired:
	case <-time.After(time.Minute):
		t.Fatal("OnFault was not called")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[0]
}

func (r *faultRecorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

// countingHandler counts the records logged at error level.
type countingHandler struct {
	slog.Handler
	errors atomic.Int64
}

func newCountingHandler() *countingHandler {
	return &countingHandler{Handler: slog.DiscardHandler}
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.errors.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// appendEntries appends n entries of size bytes at term after the log's
// last index, synced, through Store.Append as the Raft loop does.
func appendEntries(t *testing.T, s *Store, n, size int, term, vote uint64) error {
	t.Helper()
	last, _ := s.RaftLog().LastIndex()
	ents := make([]*pb.Entry, n)
	for i := range ents {
		ents[i] = &pb.Entry{Index: new(last + 1 + uint64(i)), Term: new(term), Data: make([]byte, size)}
	}
	hs := &pb.HardState{Term: new(term), Vote: new(vote), Commit: new(uint64(0))}
	return s.Append(hs, ents, true)
}

// TestCorruptSSTableFaultsTheStore flips a byte in an sstable and forces
// a compaction over it. Pebble's default DataCorruption handler calls
// Logger.Fatalf on the compaction goroutine, and the old logger panicked
// there, which ended the process. The store must instead report the
// fault through OnFault and return it from every later call.
func TestCorruptSSTableFaultsTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec := newFaultRecorder()
	// No automatic compactions: under load Pebble could otherwise merge
	// the two tables before they are corrupted, and a manual compaction of
	// the one table left at the bottom is a move that reads nothing.
	s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes, OnFault: rec.hook, tunePebble: func(o *pebble.Options) {
		o.DisableAutomaticCompactions = true
	}})
	require.NoError(t, err)
	defer s.Close()

	// Two overlapping flushed tables, so the compaction must read both.
	// The Raft log is not in Pebble: write local records of a test-only
	// kind instead.
	for range 2 {
		b := s.db.NewBatch()
		for i := range uint64(200) {
			val := make([]byte, 512)
			for k := range val {
				val[k] = byte(i*31 + uint64(k)*7 + uint64(k*k))
			}
			require.NoError(t, b.Set(appendUint64([]byte{prefixLocal, 'x'}, i), val, nil))
		}
		require.NoError(t, b.Commit(pebble.Sync))
		require.NoError(t, b.Close())
		require.NoError(t, s.db.Flush())
	}
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.Len(t, tables, 2, "two flushed tables, none compacted")
	for _, path := range tables {
		require.True(t, flipByteIfWhole(path, 100), "corrupt %s", path) // inside the first data block
	}

	// Pebble marks the failed span and keeps a manual compaction waiting
	// to retry it: stop waiting once the fault is in.
	ctx, cancel := context.WithCancel(context.Background())
	compacted := make(chan error, 1)
	go func() { compacted <- s.db.Compact(ctx, []byte{0}, []byte{0xff}, false) }()
	fault := rec.wait(t)
	cancel()
	require.Error(t, <-compacted, "compaction over a corrupt table")

	require.ErrorIs(t, fault, ErrFault)
	require.Contains(t, fault.Error(), "corruption")
	require.ErrorIs(t, s.Fault(), ErrFault)
	require.ErrorIs(t, s.Sync(), ErrFault)
	require.ErrorIs(t, appendEntries(t, s, 1, 8, 1, 1), ErrFault)
	require.ErrorIs(t, s.InstallSnapshot(&pb.Snapshot{}), ErrFault)
	require.Equal(t, 1, rec.calls(), "OnFault is called once")
	// Close still releases everything (goleak checks Pebble's goroutines).
	_ = s.Close()
}

// flipByteIfWhole flips the byte at off, reporting false if the file is
// gone or too short to have it.
func flipByteIfWhole(path string, off int64) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return false
	}
	b[0] ^= 0x5a
	_, err = f.WriteAt(b[:], off)
	return err == nil
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	var b [1]byte
	_, err = f.ReadAt(b[:], off)
	require.NoError(t, err)
	b[0] ^= 0x5a
	_, err = f.WriteAt(b[:], off)
	require.NoError(t, err)
}

// diskFull fails writes to the files whose names end with suffix with
// ENOSPC while on.
type diskFull struct {
	suffix string
	on     atomic.Bool
	hits   atomic.Int64
}

func (d *diskFull) MaybeError(op errorfs.Op) error {
	if !d.on.Load() || !strings.HasSuffix(op.Path, d.suffix) {
		return nil
	}
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpReuseForWrite, errorfs.OpFileWrite, errorfs.OpFileWriteAt,
		errorfs.OpFilePreallocate, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		d.hits.Add(1)
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

func (d *diskFull) String() string { return "diskFull(" + d.suffix + ")" }

// TestDiskFullOnFlushStopsCleanly fills the disk for sstables: every
// flush fails, and Pebble retries it at once, forever (it logged tens of
// thousands of lines a minute). The store must report the fault once,
// stop logging, and reopen with everything it synced once space returns.
func TestDiskFullOnFlushStopsCleanly(t *testing.T) {
	t.Parallel()
	disk := NewMemDisk()
	full := &diskFull{suffix: ".sst"}
	logs := newCountingHandler()
	rec := newFaultRecorder()
	opts := Options{
		Disk:    disk,
		Logger:  slog.New(logs),
		OnFault: rec.hook,
		wrapFS:  func(fs vfs.FS) vfs.FS { return errorfs.Wrap(fs, full) },
	}
	s, err := Open(opts)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, appendEntries(t, s, 100, 256, 1, 1))
	want, _ := s.RaftLog().LastIndex()

	full.on.Store(true)
	_, err = s.db.AsyncFlush()
	require.NoError(t, err)
	fault := rec.wait(t)
	require.ErrorIs(t, fault, ErrFault)
	require.ErrorIs(t, fault, syscall.ENOSPC)
	require.ErrorIs(t, appendEntries(t, s, 1, 8, 1, 1), ErrFault)

	// Pebble keeps retrying the flush until Close; the retries must
	// neither spin nor log.
	require.Eventually(t, func() bool { return s.faults.retries.Load() >= 5 }, time.Minute, 5*time.Millisecond)
	require.LessOrEqual(t, logs.errors.Load(), int64(logBurst+2), "error lines logged")
	require.Equal(t, 1, rec.calls())
	_ = s.Close()

	// Space returns: the member reopens with everything it synced.
	full.on.Store(false)
	s2, err := Open(Options{Disk: disk})
	require.NoError(t, err)
	defer s2.Close()
	last, _ := s2.RaftLog().LastIndex()
	require.Equal(t, want, last)
	ents, err := s2.RaftLog().Entries(1, last+1, 1<<30)
	require.NoError(t, err)
	require.Len(t, ents, int(last))
}

// TestDiskFullOnWALFailsTheAppend fills the disk under the Raft log's
// segments: the append fails with a fault of the store (its state on
// disk is unknown), and the host process lives.
func TestDiskFullOnWALFailsTheAppend(t *testing.T) {
	t.Parallel()
	disk := NewMemDisk()
	full := &diskFull{suffix: ".wal"}
	rec := newFaultRecorder()
	s, err := Open(Options{
		Disk:    disk,
		OnFault: rec.hook,
		wrapFS:  func(fs vfs.FS) vfs.FS { return errorfs.Wrap(fs, full) },
	})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, appendEntries(t, s, 50, 64, 1, 1))
	want, _ := s.RaftLog().LastIndex()

	full.on.Store(true)
	err = appendEntries(t, s, 10, 64, 1, 1)
	require.ErrorIs(t, err, ErrFault)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, rec.wait(t), ErrFault)
	require.ErrorIs(t, s.Sync(), ErrFault)
	_ = s.Close()

	full.on.Store(false)
	s2, err := Open(Options{Disk: disk})
	require.NoError(t, err)
	defer s2.Close()
	last, _ := s2.RaftLog().LastIndex()
	require.GreaterOrEqual(t, last, want, "an acknowledged entry was lost")
}

// TestRepeatedBackgroundErrorsBecomeAFault checks the count: errors that
// retrying might cure (too many open files) fault the store only after
// faultAfterRepeats in a row, and a flush or compaction that works in
// between starts the count again.
func TestRepeatedBackgroundErrorsBecomeAFault(t *testing.T) {
	t.Parallel()
	rec := newFaultRecorder()
	f := newFaults(slog.New(slog.DiscardHandler), rec.hook)
	emfile := &os.PathError{Op: "open", Path: "000012.sst", Err: syscall.EMFILE}
	for range faultAfterRepeats - 1 {
		f.background(emfile)
	}
	f.worked()
	for range faultAfterRepeats - 1 {
		f.background(emfile)
	}
	require.NoError(t, f.get())
	require.Equal(t, 0, rec.calls())
	f.background(emfile)
	require.ErrorIs(t, f.get(), ErrFault)
	require.ErrorIs(t, f.get(), syscall.EMFILE)
	require.Equal(t, 1, rec.calls())

	// Disk full is a fault at once.
	f2 := newFaults(slog.New(slog.DiscardHandler), nil)
	f2.background(&os.PathError{Op: "write", Path: "000013.sst", Err: syscall.ENOSPC})
	require.ErrorIs(t, f2.get(), syscall.ENOSPC)
}

// TestFatalfOnPebbleGoroutineReturns checks that a Fatalf other than the
// commit's (Pebble's flush and compaction goroutines) records the fault
// and returns instead of panicking, and that the commit's one panics
// with the fault, for the committing Store method to recover.
func TestFatalfOnPebbleGoroutineReturns(t *testing.T) {
	t.Parallel()
	f := newFaults(slog.New(slog.DiscardHandler), nil)
	lg := faultLogger{pebbleLogger{slog.New(slog.DiscardHandler)}, f}
	require.NotPanics(t, func() { lg.Fatalf("%s", "MANIFEST sync failed: disk gone") })
	require.ErrorIs(t, f.get(), ErrFault)
	require.Contains(t, f.get().Error(), "MANIFEST sync failed")

	var err error
	func() {
		defer recoverFault(&err)
		lg.Fatalf(commitErrorFormat, errors.New("write failed"))
	}()
	require.ErrorIs(t, err, ErrFault)
	require.Panics(t, func() {
		var err error
		defer recoverFault(&err)
		panic("not a fault")
	}, "other panics go on")
}

// TestFaultFSFencesWrites checks that after a fault nothing more is
// written, created, renamed or removed.
func TestFaultFSFencesWrites(t *testing.T) {
	t.Parallel()
	f := newFaults(slog.New(slog.DiscardHandler), nil)
	fs := &faultFS{FS: vfs.NewMem(), f: f}
	file, err := fs.Create("a", vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	defer file.Close()
	_, err = file.Write([]byte("x"))
	require.NoError(t, err)

	f.fail(ErrFault)
	_, err = file.Write([]byte("y"))
	require.ErrorIs(t, err, ErrFault)
	_, err = file.WriteAt([]byte("y"), 0)
	require.ErrorIs(t, err, ErrFault)
	_, err = fs.Create("b", vfs.WriteCategoryUnspecified)
	require.ErrorIs(t, err, ErrFault)
	require.ErrorIs(t, fs.Rename("a", "c"), ErrFault)
	require.ErrorIs(t, fs.Remove("a"), ErrFault)
	// Reads still work.
	r, err := fs.Open("a")
	require.NoError(t, err)
	defer r.Close()
	var b [1]byte
	_, err = r.Read(b[:])
	require.NoError(t, err)
	require.Equal(t, byte('x'), b[0])
}

// TestLogLimiter checks the rate limit of Pebble's error lines.
func TestLogLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l := logLimiter{now: func() time.Time { return now }}
	for i := range logBurst {
		ok, dropped := l.allow()
		require.True(t, ok, "line %d", i)
		require.Zero(t, dropped)
	}
	for range 1000 {
		ok, _ := l.allow()
		require.False(t, ok)
	}
	now = now.Add(logWindow)
	ok, dropped := l.allow()
	require.True(t, ok)
	require.Equal(t, 1000, dropped)
}
