package fence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
)

// The marks file, version 1. All integers are little-endian.
//
//	header: "CoordFM" and the version byte, 8 bytes
//	record: 0xF5, name length (uint16), token (uint64), name,
//	        CRC-32C of the record's preceding bytes (uint32)
//
// Each mark change appends one record and fsyncs. Replay keeps, for each
// name, the highest token of the valid records. Appends are serialized
// and each is synced before the next starts, so a crash damages at most
// the last record: replay drops a bad last record and refuses a file
// that has anything more than that after its first bad record.
const (
	marksMagic      = "CoordFM"
	marksVersion    = 1
	marksHeaderSize = len(marksMagic) + 1
	recMagic        = 0xF5
	recOverhead     = 1 + 2 + 8 + 4
	// maxMarkResource bounds the resource names FileMarks stores, in bytes.
	maxMarkResource = 4096
	maxRecordSize   = recOverhead + maxMarkResource
	// Compaction rewrites the file once it is past this size and four
	// times what a rewritten file would hold.
	compactMinBytes = 256 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileMarks is a durable MarkStore: its marks live in one file and
// survive a restart of the resource. Each Raise that changes a mark is on
// stable storage (written and fsynced) before it returns; Raises that
// change nothing do no I/O. The file is an append-only log, compacted now
// and then by writing a fresh copy beside it and renaming it into place;
// a crash at any moment loses no mark a Raise has returned.
//
// Resource names are at most 4096 bytes (a longer one fails with
// ErrInvalidKey). After a write to the file fails, every later Raise
// fails with that error (the file's state is then unknown); open the
// file again to carry on.
//
// A FileMarks is safe for concurrent use by multiple goroutines; Raises
// that change marks are serialized (one fsync each). Only one FileMarks
// may use a file at a time, in any process: OpenFileMarks takes an
// exclusive lock on a companion file, path + ".lock" (left in place, as
// removing a lock file races with the next opener), and refuses with
// ErrMarksInUse while someone else holds it.
type FileMarks struct {
	path string // absolute
	lock io.Closer

	mu     sync.Mutex
	file   *os.File // for appends; nil after a failed rewrite
	marks  map[string]Token
	size   int64 // bytes in the file
	live   int64 // bytes a rewritten file would hold, header included
	err    error // sticky: a write failed
	closed bool
}

// OpenFileMarks opens the marks file at path, creating it (but not its
// directory) if it does not exist, and replays it. A file that is not a
// marks file, has an unknown format version, or is damaged before its
// last record gives an error wrapping ErrMarksFormat; a damaged last
// record (a crash mid-write) is dropped and the file rewritten without it.
// Close the FileMarks when done.
func OpenFileMarks(path string) (*FileMarks, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("coord: fencing marks %s: %w", path, err)
	}
	lock, err := lockMarksFile(abs + ".lock")
	if err != nil {
		return nil, fmt.Errorf("coord: fencing marks %s: %w", abs, err)
	}
	fm := &FileMarks{path: abs, lock: lock, marks: map[string]Token{}, live: int64(marksHeaderSize)}
	if err := fm.load(); err != nil {
		if fm.file != nil {
			fm.file.Close()
		}
		lock.Close()
		return nil, err
	}
	return fm, nil
}

func (fm *FileMarks) ioErr(op string, err error) error {
	return fmt.Errorf("coord: fencing marks %s: %s: %w", fm.path, op, err)
}

func (fm *FileMarks) load() error {
	// A leftover of a rewrite cut short by a crash; the log is intact.
	if err := os.Remove(fm.tmpPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fm.ioErr("remove leftover", err)
	}
	data, err := os.ReadFile(fm.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fm.ioErr("read", err)
	}
	if len(data) == 0 { // new (or created empty by someone else)
		return fm.rewrite()
	}
	if len(data) < marksHeaderSize || string(data[:len(marksMagic)]) != marksMagic {
		return fmt.Errorf("%w: %s is not a fencing marks file", ErrMarksFormat, fm.path)
	}
	if v := data[len(marksMagic)]; v != marksVersion {
		return fmt.Errorf("%w: %s has format version %d; this build reads version %d",
			ErrMarksFormat, fm.path, v, marksVersion)
	}
	end, err := fm.replay(data)
	if err != nil {
		return err
	}
	if end < len(data) { // drop the torn last record
		return fm.rewrite()
	}
	f, err := os.OpenFile(fm.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fm.ioErr("open", err)
	}
	fm.file, fm.size = f, int64(len(data))
	return nil
}

// replay applies data's valid records and returns where they end.
func (fm *FileMarks) replay(data []byte) (int, error) {
	p := marksHeaderSize
	for p < len(data) {
		name, t, size, ok := decodeMark(data[p:])
		if !ok {
			rest := len(data) - p
			if rest > maxRecordSize || (size > 0 && size < rest) {
				return 0, fmt.Errorf("%w: %s is damaged at offset %d, before its last record",
					ErrMarksFormat, fm.path, p)
			}
			return p, nil
		}
		if old, seen := fm.marks[name]; !seen {
			fm.live += int64(size)
			fm.marks[name] = t
		} else if t > old {
			fm.marks[name] = t
		}
		p += size
	}
	return p, nil
}

// decodeMark reads the record at the start of b. size is the record's
// length as its header says (0 if the header is unreadable); ok is false
// for a record that is incomplete or fails its checksum.
func decodeMark(b []byte) (name string, t Token, size int, ok bool) {
	if len(b) < 3 || b[0] != recMagic {
		return "", 0, 0, false
	}
	n := int(binary.LittleEndian.Uint16(b[1:3]))
	if n > maxMarkResource {
		return "", 0, 0, false
	}
	size = recOverhead + n
	if len(b) < size {
		return "", 0, size, false
	}
	body := b[:size-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[size-4:size]) {
		return "", 0, size, false
	}
	t = Token(binary.LittleEndian.Uint64(b[3:11]))
	if t <= 0 {
		return "", 0, size, false
	}
	return string(b[11 : 11+n]), t, size, true
}

func appendMark(b []byte, name string, t Token) []byte {
	start := len(b)
	b = append(b, recMagic)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
	b = binary.LittleEndian.AppendUint64(b, uint64(t))
	b = append(b, name...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// Raise implements MarkStore; see FileMarks for durability.
func (fm *FileMarks) Raise(resource string, t Token) (Token, error) {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	if fm.closed {
		return 0, fmt.Errorf("%w: fencing marks %s is closed", ErrClosed, fm.path)
	}
	if fm.err != nil {
		return 0, fm.err
	}
	mark, seen := fm.marks[resource]
	if t <= mark {
		return mark, nil
	}
	if len(resource) > maxMarkResource {
		return 0, fmt.Errorf("%w: fencing resource name of %d bytes, limit %d",
			ErrInvalidKey, len(resource), maxMarkResource)
	}
	rec := appendMark(nil, resource, t)
	if _, err := fm.file.Write(rec); err != nil {
		fm.err = fm.ioErr("append", err)
		return 0, fm.err
	}
	if err := fm.file.Sync(); err != nil {
		fm.err = fm.ioErr("sync", err)
		return 0, fm.err
	}
	fm.size += int64(len(rec))
	if !seen {
		fm.live += int64(len(rec))
	}
	fm.marks[resource] = t
	if fm.size > max(compactMinBytes, 4*fm.live) {
		// The mark is durable already; a failed rewrite that left the
		// log usable is retried on a later Raise, and one that did not
		// is sticky in fm.err.
		_ = fm.rewrite()
	}
	return t, nil
}

func (fm *FileMarks) tmpPath() string { return fm.path + ".tmp" }

// rewrite replaces the file with a fresh one holding only the current
// marks. It fails harmlessly (the log stays in use) until the old file is
// closed; past that point, a failure is sticky.
func (fm *FileMarks) rewrite() error {
	buf := make([]byte, 0, fm.live)
	buf = append(buf, marksMagic...)
	buf = append(buf, marksVersion)
	for _, name := range slices.Sorted(maps.Keys(fm.marks)) {
		buf = appendMark(buf, name, fm.marks[name])
	}
	tmp := fm.tmpPath()
	if err := writeSynced(tmp, buf); err != nil {
		os.Remove(tmp)
		return fm.ioErr("rewrite", err)
	}
	// Closed before the rename for systems that cannot rename over an
	// open file; from here on the FileMarks has no file until reopened.
	if fm.file != nil {
		fm.file.Close()
		fm.file = nil
	}
	fail := func(op string, err error) error {
		fm.err = fm.ioErr(op, err)
		return fm.err
	}
	if err := os.Rename(tmp, fm.path); err != nil {
		os.Remove(tmp)
		return fail("rename", err)
	}
	if err := syncDir(filepath.Dir(fm.path)); err != nil {
		return fail("sync directory", err)
	}
	f, err := os.OpenFile(fm.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fail("reopen", err)
	}
	fm.file, fm.size, fm.live = f, int64(len(buf)), int64(len(buf))
	return nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir makes a rename in dir durable. Windows has no directory fsync
// (and does not need one for that).
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close closes the file. Later Raises fail with ErrClosed; closing again
// does nothing. Close waits for a Raise in progress.
func (fm *FileMarks) Close() error {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	if fm.closed {
		return nil
	}
	fm.closed = true
	// Closing the lock file releases the lock, after the marks file is
	// closed: the next opener finds every record written.
	var err error
	if fm.file != nil {
		err = fm.file.Close()
		fm.file = nil
	}
	if lerr := fm.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fm.ioErr("close", err)
	}
	return nil
}

var _ MarkStore = (*FileMarks)(nil)
