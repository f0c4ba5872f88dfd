// Package wal is a Raft log kept as a log: entries and hard states are
// appended to preallocated segment files, one checksummed frame per
// append, made durable with one fdatasync; the log's head is dropped a
// whole segment at a time. It replaces the Raft log's place inside an
// LSM, where every entry was written to Pebble's WAL, then its memtable,
// then flushed and compacted, only to be range-deleted soon after.
//
// Open recovers the log. A frame that a crash left half written at the
// end of the newest segment (a torn tail) is cut off: it was never
// synced, so never acknowledged. Damage anywhere else, to data that was
// once durable, is refused with ErrCorrupt: a member must not run on a
// log that silently lost entries it may have acknowledged (invariant 12
// of ARCHITECTURE.md). A refused log is left exactly as it was: recovery
// reads first (Inspect) and writes its repairs only once the log proved
// whole (Recovered.Open).
package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FormatVersion is the segment format this package writes and reads.
// A segment of another version is refused with ErrFormat.
const FormatVersion uint64 = 1

// DefaultSegmentBytes is Options.SegmentBytes' default: big enough that
// cutting a segment (a create, a preallocation and two syncs) is rare,
// small enough that compaction frees space soon after the log moves on.
const DefaultSegmentBytes = 32 << 20

// Sentinel errors.
var (
	// ErrCorrupt is returned by Open when a frame that was once durable
	// is damaged or missing: the log may have lost entries this member
	// acknowledged, so it must not be used.
	ErrCorrupt = errors.New("wal: damaged record before the log's tail")
	// ErrFormat is returned by Open for a segment of an unknown version.
	ErrFormat = errors.New("wal: unknown segment format version")
	// ErrClosed is returned by calls on a closed log.
	ErrClosed = errors.New("wal: closed")
)

// Options configure a Log.
type Options struct {
	// FS is the file system. nil = the operating system's.
	FS vfs.FS
	// Dir is the directory holding the segments; created if missing.
	Dir string
	// SegmentBytes is the size a segment is preallocated to and cut at.
	// 0 = DefaultSegmentBytes.
	SegmentBytes int64
	// Logger receives recovery events. nil = discard.
	Logger *slog.Logger
}

// Recovery says what Open found.
type Recovery struct {
	// Segments is the number of segment files read.
	Segments int
	// TornBytes is how many bytes of a torn tail were cut off (0 = none).
	TornBytes int64
}

// segment is one file of the log.
type segment struct {
	seq      uint64
	name     string
	f        vfs.File
	maxIndex uint64 // highest entry index written to it; 0 = none
}

// pos is where an entry lives.
type pos struct {
	seg  *segment
	off  int64 // of the marshalled entry in the segment
	n    uint32
	term uint64
}

// Log is an open write-ahead log. Its read methods (Term, Entries, the
// bounds) may be called concurrently with a write, which they do not
// wait for: a write's fsync holds only the writers' lock. Writes are
// serialized.
type Log struct {
	fs     vfs.FS
	dir    string
	segMax int64
	logger *slog.Logger

	// wmu serializes writers. The fields below it change only under it,
	// so a writer may read them without mu.
	wmu    sync.Mutex
	tail   *segment // the segment being written (also segs' last)
	off    int64    // write offset in tail
	seq    uint64   // last frame's sequence number
	synced uint64   // last frame known durable
	dirty  bool     // tail has frames not yet synced
	frame  frameBuf

	// mu guards the log's state as readers see it. Readers hold it
	// (shared) across their file reads, so a segment is not closed under
	// them; writers take it briefly to publish.
	mu        sync.RWMutex
	segs      []*segment
	hs        *pb.HardState // nil = none written
	trunc     uint64        // the log is (trunc, trunc+len(ents)]
	truncTerm uint64
	ents      []pos
	closed    bool
	recovery  Recovery

	scanCRCBytes int64 // bytes Open checksummed, for tests of its work

	// prep prepares the next segment ahead of the cut (prepare.go); nil
	// until Open, and for a log opened to be read. stats is guarded by
	// wmu.
	prep  *preparer
	stats Stats
}

// Open opens (or creates) the log in opts.Dir and recovers it. A log it
// refuses is left as it was: Open writes only once recovery has found
// the log whole (see Inspect).
func Open(opts Options) (*Log, error) {
	r, err := Inspect(opts)
	if err != nil {
		return nil, err
	}
	return r.Open()
}

// Inspect reads the log in opts.Dir and recovers its state in memory,
// as Open does, but writes nothing: not the torn tail it would cut off,
// nor the unfinished segment it would remove. A caller that must check
// the recovered log against a record of its own before anything changes
// (the store's durability record) inspects it, and opens it only if it
// passes.
func Inspect(opts Options) (*Recovered, error) {
	l := &Log{fs: opts.FS, dir: opts.Dir, segMax: opts.SegmentBytes, logger: opts.Logger}
	if l.fs == nil {
		l.fs = vfs.Default
	}
	if l.segMax <= 0 {
		l.segMax = DefaultSegmentBytes
	}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	r, err := l.recover()
	if err != nil {
		return nil, err
	}
	return &Recovered{l: l, repairs: r}, nil
}

// Recovered is a log that Inspect read and nothing has been written to.
type Recovered struct {
	l       *Log
	repairs repairs
	opened  bool
}

// HardState returns the last hard state the log holds, or nil for none.
func (r *Recovered) HardState() *pb.HardState { return r.l.HardState() }

// Truncated returns the log's truncation point and its term.
func (r *Recovered) Truncated() (index, term uint64) { return r.l.Truncated() }

// LastIndex is the index of the last entry, or the truncation point if
// there is none.
func (r *Recovered) LastIndex() uint64 { return r.l.LastIndex() }

// Term returns entry i's term, as Log.Term does.
func (r *Recovered) Term(i uint64) (uint64, error) { return r.l.Term(i) }

// Open makes the recovered log ready for writing: it cuts the torn tail
// off, removes what a crash left unfinished or a compaction left behind,
// syncs, and returns the log. It may be called once.
func (r *Recovered) Open() (*Log, error) {
	if r.opened {
		return nil, errors.New("wal: recovered log opened twice")
	}
	r.opened = true
	if err := r.l.repair(r.repairs); err != nil {
		r.l.closeFiles()
		return nil, err
	}
	r.l.startPreparing()
	return r.l, nil
}

// Recovery reports what Open found.
func (l *Log) Recovery() Recovery {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.recovery
}

// HardState returns the last hard state appended, or nil for none.
func (l *Log) HardState() *pb.HardState {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.hs == nil {
		return nil
	}
	return proto.Clone(l.hs).(*pb.HardState)
}

// FirstIndex is the index of the first entry the log may hold (one past
// the truncation point).
func (l *Log) FirstIndex() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.trunc + 1
}

// LastIndex is the index of the last entry, or the truncation point if
// there is none.
func (l *Log) LastIndex() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.trunc + uint64(len(l.ents))
}

// Truncated returns the truncation point: the index before the first
// entry and its term.
func (l *Log) Truncated() (index, term uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.trunc, l.truncTerm
}

// Term returns entry i's term, as raft.Storage's Term does.
func (l *Log) Term(i uint64) (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	switch {
	case l.closed:
		return 0, ErrClosed
	case i < l.trunc:
		return 0, raft.ErrCompacted
	case i == l.trunc:
		return l.truncTerm, nil
	case i > l.trunc+uint64(len(l.ents)):
		return 0, raft.ErrUnavailable
	}
	return l.ents[i-l.trunc-1].term, nil
}

// Entries returns the entries [lo, hi), at most maxSize bytes of them but
// at least one, as raft.Storage's Entries does.
func (l *Log) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	last := l.trunc + uint64(len(l.ents))
	switch {
	case l.closed:
		return nil, ErrClosed
	case lo <= l.trunc:
		return nil, raft.ErrCompacted
	case hi > last+1:
		return nil, fmt.Errorf("wal: entries [%d, %d) beyond last index %d: %w", lo, hi, last, raft.ErrUnavailable)
	case lo > hi:
		return nil, fmt.Errorf("wal: invalid entries range [%d, %d)", lo, hi)
	case lo == hi:
		return nil, nil
	}
	ps := l.ents[lo-l.trunc-1 : hi-l.trunc-1]
	out := make([]*pb.Entry, 0, len(ps))
	var size uint64
	var buf []byte
	for i, p := range ps {
		size += uint64(p.n)
		if i > 0 && size > maxSize {
			break
		}
		if cap(buf) < int(p.n) {
			buf = make([]byte, p.n)
		}
		b := buf[:p.n]
		if _, err := p.seg.f.ReadAt(b, p.off); err != nil {
			return nil, fmt.Errorf("wal: read entry %d: %w", lo+uint64(i), err)
		}
		e := &pb.Entry{}
		if err := proto.Unmarshal(b, e); err != nil {
			return nil, fmt.Errorf("wal: decode entry %d: %w", lo+uint64(i), err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Close syncs what was appended and closes the files.
func (l *Log) Close() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.stopPreparing()
	var err error
	if l.dirty {
		err = l.tail.f.SyncData()
	}
	l.closed = true
	if cerr := l.closeFiles(); err == nil {
		err = cerr
	}
	return err
}

func (l *Log) closeFiles() error {
	var err error
	for _, s := range l.segs {
		if s.f != nil {
			if cerr := s.f.Close(); err == nil {
				err = cerr
			}
			s.f = nil
		}
	}
	return err
}
