package storage

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrFault reports a storage fault: Pebble found corruption, or could not
// write (disk full, out of file descriptors, I/O error). The store stops
// writing at the first one and every later call returns it; the member
// must stop. Reopening the directory once the cause is gone (space freed,
// limits raised) is how it recovers; a corrupt directory stays refused.
var ErrFault = errors.New("storage: storage fault")

// Background errors of one kind in a row (a flush Pebble retries as soon
// as it fails, a compaction) before they count as a fault. Errors that
// retrying cannot cure (corruption, disk full) are a fault at once.
const faultAfterRepeats = 5

// While faulted, Pebble still retries a failed flush as soon as it fails
// (it has no backoff) until the store closes. Each report pauses this
// long, on Pebble's goroutine, so the retries do not spin a CPU.
const faultRetryPause = 50 * time.Millisecond

// Pebble's error lines: at most logBurst per logWindow, then a count of
// what was left out (a full disk made Pebble log tens of thousands a minute).
const (
	logBurst  = 10
	logWindow = 10 * time.Second
)

// faults records the store's first fault and tells Options.OnFault.
type faults struct {
	err     atomic.Pointer[error]
	onFault func(error)
	log     *slog.Logger
	lim     logLimiter
	retries atomic.Int64 // background errors reported after the fault

	mu      sync.Mutex
	repeats int    // background errors in a row since the last flush or compaction that worked
	kind    string // what the last of them was doing
}

func newFaults(log *slog.Logger, onFault func(error)) *faults {
	return &faults{log: log, onFault: onFault, lim: logLimiter{now: time.Now}}
}

// get returns the fault, or nil.
func (f *faults) get() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records err (which wraps ErrFault) unless a fault is recorded
// already, and returns the recorded one. The hook runs once, for the
// first; it may run on one of Pebble's goroutines while Pebble holds its
// own locks, which is why Options.OnFault must neither block nor call the
// store.
func (f *faults) fail(err error) error {
	if f.err.CompareAndSwap(nil, &err) {
		f.log.Error("storage fault: the member stops", "err", err)
		if f.onFault != nil {
			f.onFault(err)
		}
	}
	return f.get()
}

// faultPanic carries a fault out of a Pebble call that must not return
// (see faultLogger.Fatalf) to the Store method that made it.
type faultPanic struct{ err error }

func (p *faultPanic) Error() string { return p.err.Error() }
func (p *faultPanic) Unwrap() error { return p.err }

// recoverFault turns a faultPanic into *errp; any other panic goes on.
// Deferred by Store methods that write.
func recoverFault(errp *error) {
	if r := recover(); r != nil {
		fp, ok := r.(*faultPanic)
		if !ok {
			panic(r)
		}
		*errp = fp.err
	}
}

// listener is the part of Pebble's EventListener that reports faults.
func (f *faults) listener() *pebble.EventListener {
	return &pebble.EventListener{
		// Pebble's default here is Logger.Fatalf. Without it, corruption
		// found by a read returns an error to the reader and corruption
		// found by a compaction fails the compaction (BackgroundError):
		// nothing panics on Pebble's goroutines.
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			f.fail(fmt.Errorf("%w: corruption in %s: %w", ErrFault, info.Path, info.Details))
		},
		BackgroundError: f.background,
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err == nil {
				f.worked()
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err == nil {
				f.worked()
			}
		},
	}
}

// background handles an error of Pebble's own work (flushes, compactions,
// table stats). Pebble calls it with its mutex held.
func (f *faults) background(err error) {
	if f.get() != nil {
		// Already failed: the flush that failed is about to be retried.
		f.retries.Add(1)
		time.Sleep(faultRetryPause)
		return
	}
	if incurable(err) {
		f.fail(fmt.Errorf("%w: %w", ErrFault, err))
		return
	}
	kind := errKind(err)
	f.mu.Lock()
	if kind != f.kind {
		f.kind, f.repeats = kind, 0
	}
	f.repeats++
	n := f.repeats
	f.mu.Unlock()
	if n >= faultAfterRepeats {
		f.fail(fmt.Errorf("%w: %d background errors in a row: %w", ErrFault, n, err))
		return
	}
	f.logError("pebble background error", "err", err, "in_a_row", n)
}

func (f *faults) worked() {
	f.mu.Lock()
	f.repeats, f.kind = 0, ""
	f.mu.Unlock()
}

// incurable reports errors that retrying at once cannot cure.
func incurable(err error) bool {
	return errors.Is(err, pebble.ErrCorruption) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EIO)
}

// errKind names the kind of a background error for counting repeats:
// the operating system's error number if there is one, else its type.
func errKind(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op
	}
	return fmt.Sprintf("%T", err)
}

// logError logs through the limiter.
func (f *faults) logError(msg string, args ...any) {
	ok, dropped := f.lim.allow()
	if dropped > 0 {
		f.log.Error("pebble errors left out of the log", "component", "pebble", "count", dropped)
	}
	if ok {
		f.log.Error(msg, append(args, "component", "pebble")...)
	}
}

// logLimiter lets logBurst lines through per logWindow.
type logLimiter struct {
	now func() time.Time

	mu      sync.Mutex
	start   time.Time
	n       int
	dropped int
}

// allow reports whether a line may be logged now, and how many lines
// were left out since the last report of that count (reported once per
// window, with the first line of the next one).
func (l *logLimiter) allow() (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.start.IsZero() || now.Sub(l.start) >= logWindow {
		l.start, l.n = now, 0
		dropped, l.dropped = l.dropped, 0
	}
	if l.n >= logBurst {
		l.dropped++
		return false, dropped
	}
	l.n++
	return true, dropped
}

// faultLogger is the Logger the Store gives Pebble.
type faultLogger struct {
	pebbleLogger
	f *faults
}

// Errorf logs through the limiter.
func (p faultLogger) Errorf(format string, args ...any) {
	p.f.logError(fmt.Sprintf(format, args...))
}

// commitErrorFormat is the one Fatalf Pebble makes on the goroutine of a
// caller's commit (DB.Apply) after the write-ahead log failed. If Fatalf
// returned, that commit would report success for a write that is not
// durable, so this one panics; the Store method that committed recovers
// it (raftnode's goroutines do too).
const commitErrorFormat = "pebble: fatal commit error: %v"

// Fatalf is called by Pebble for conditions it cannot continue after:
// a failed commit, a failed MANIFEST write (on its flush and compaction
// goroutines, with its mutex held), broken invariants. A panic on
// Pebble's goroutines would end the host process, and neither ending the
// goroutine (runtime.Goexit leaves the flush or compaction counted as
// running, so Close waits forever) nor blocking it (it holds the DB
// mutex) is safe. So Fatalf records the fault, which stops every write
// to the disk (faultFS), and returns: Pebble goes on with an error and
// nothing more reaches the disk, which stays as a crash at that instant
// would have left it.
func (p faultLogger) Fatalf(format string, args ...any) {
	fe := &fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if e, ok := a.(error); ok {
			fe.causes = append(fe.causes, e)
		}
	}
	err := p.f.fail(fe)
	if format == commitErrorFormat {
		panic(&faultPanic{err: err})
	}
}

// fatalError is a fault Pebble reported through Fatalf: it wraps
// ErrFault and the errors among Fatalf's arguments (ENOSPC, ...).
type fatalError struct {
	msg    string
	causes []error
}

func (e *fatalError) Error() string { return ErrFault.Error() + ": " + e.msg }
func (e *fatalError) Unwrap() []error {
	return append([]error{ErrFault}, e.causes...)
}

// faultFS refuses every new write to the disk once the store has a fault,
// so whatever Pebble does after one (it may go on after a failed MANIFEST
// write, and keeps retrying a failed flush) leaves the directory as it
// was at the fault. It costs an atomic load per write.
type faultFS struct {
	vfs.FS
	f *faults
}

func (fs *faultFS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, f: fs.f}, nil
}

func (fs *faultFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.f.get(); err != nil {
		return nil, err
	}
	return fs.wrap(fs.FS.Create(name, category))
}

func (fs *faultFS) Link(oldname, newname string) error {
	if err := fs.f.get(); err != nil {
		return err
	}
	return fs.FS.Link(oldname, newname)
}

func (fs *faultFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.f.get(); err != nil {
		return nil, err
	}
	return fs.wrap(fs.FS.OpenReadWrite(name, category, opts...))
}

func (fs *faultFS) OpenDir(name string) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenDir(name))
}

func (fs *faultFS) Remove(name string) error {
	if err := fs.f.get(); err != nil {
		return err
	}
	return fs.FS.Remove(name)
}

func (fs *faultFS) RemoveAll(name string) error {
	if err := fs.f.get(); err != nil {
		return err
	}
	return fs.FS.RemoveAll(name)
}

func (fs *faultFS) Rename(oldname, newname string) error {
	if err := fs.f.get(); err != nil {
		return err
	}
	return fs.FS.Rename(oldname, newname)
}

func (fs *faultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.f.get(); err != nil {
		return nil, err
	}
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, category))
}

func (fs *faultFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.f.get(); err != nil {
		return err
	}
	return fs.FS.MkdirAll(dir, perm)
}

// faultFile is a file of faultFS: writes fail after a fault. Syncs do
// not: they only make durable what was written before the fault, which
// the kernel may write back anyway, and Pebble's syncing file leaks its
// descriptor when the sync in its Close fails.
type faultFile struct {
	vfs.File
	f *faults
}

var _ io.WriterAt = (*faultFile)(nil)

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.f.get(); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.f.get(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Preallocate(offset, length int64) error {
	if err := f.f.get(); err != nil {
		return err
	}
	return f.File.Preallocate(offset, length)
}
