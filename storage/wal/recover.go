package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
)

const segmentSuffix = ".wal"

func segmentName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, segmentSuffix) }

// op is one frame that changes the log, in the order written.
type op struct {
	kind        byte
	index, term uint64 // compact, reset: the new truncation point; batch: first index
	lo, hi      int    // batch: its entries in the positions slice
	seg         *segment
}

// scan is the state of a recovery in progress.
type scan struct {
	ops       []op
	positions []pos
	hs        *pb.HardState
	seq       uint64 // last good frame
	crcBytes  int64  // bytes checksummed, for tests of the work done
}

// repairs are what Open must write to go on from a recovered log: a
// torn tail to clear, unfinished segments to remove, leftovers of a
// compaction to remove, or a first segment to create. Inspect only finds
// them, so that a log refused, by Inspect or by its caller, is left
// exactly as it was.
type repairs struct {
	fresh           bool   // no segment with a header: start the log with segment freshSeq
	freshSeq        uint64 //
	unfinished      string // the newest segment, cut short before its header was synced; "" = none
	tornAt, tornEnd int64  // the torn tail of the tail segment, cleared before writing
	leftovers       []string
}

// recover reads every segment, checks it, and rebuilds the log's state,
// writing nothing: it returns what Open must repair.
func (l *Log) recover() (repairs, error) {
	names, err := l.fs.List(l.dir)
	if errors.Is(err, os.ErrNotExist) {
		names, err = nil, nil // a new log: Open creates the directory
	}
	if err != nil {
		return repairs{}, fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	var seqs []uint64
	for _, name := range names {
		hex, ok := strings.CutSuffix(name, segmentSuffix)
		if !ok || len(hex) != 16 {
			continue
		}
		seq, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			continue
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	if len(seqs) == 0 {
		return repairs{fresh: true, freshSeq: 1}, nil
	}
	var r repairs
	// Compaction removes segments oldest first, but without a directory
	// sync after each removal a crash may bring some back: those before
	// the last gap are such leftovers. If what was lost in a gap was
	// still needed, replay finds entries missing and refuses the log.
	for i := len(seqs) - 1; i > 0; i-- {
		if seqs[i] == seqs[i-1]+1 {
			continue
		}
		for _, seq := range seqs[:i] {
			r.leftovers = append(r.leftovers, l.fs.PathJoin(l.dir, segmentName(seq)))
		}
		seqs = seqs[i:]
		break
	}

	sc := &scan{}
	r.tornAt = -1
	for i, seq := range seqs {
		last := i == len(seqs)-1
		s := &segment{seq: seq, name: l.fs.PathJoin(l.dir, segmentName(seq))}
		data, err := l.readSegment(s.name)
		if err != nil {
			return repairs{}, err
		}
		at, end, err := sc.segment(s, data, last, i == 0)
		if err != nil {
			return repairs{}, err
		}
		if at == 0 && last && i > 0 {
			// The newest segment has no readable header: a crash cut it
			// before its header was synced, so nothing in it was ever
			// acknowledged. The previous one is the tail again.
			r.unfinished = s.name
			break // the previous segment's end (tornAt) stands
		}
		if at == 0 {
			// The only segment, never begun: start afresh.
			l.scanCRCBytes = sc.crcBytes
			return repairs{fresh: true, freshSeq: seq, unfinished: s.name}, nil
		}
		r.tornAt, r.tornEnd = at, end
		l.segs = append(l.segs, s)
	}
	l.recovery.Segments = len(seqs)
	l.scanCRCBytes = sc.crcBytes
	l.tail = l.segs[len(l.segs)-1]
	l.seq = sc.seq
	l.off = r.tornAt
	if r.tornEnd > r.tornAt {
		l.recovery.TornBytes = r.tornEnd - r.tornAt
	}
	if err := l.replay(sc); err != nil {
		return repairs{}, err
	}
	return r, nil
}

// repair carries out what recover found needed, and opens the segments:
// the tail for writing, the rest for reading.
func (l *Log) repair(r repairs) error {
	if err := l.fs.MkdirAll(l.dir, 0o755); err != nil {
		return fmt.Errorf("wal: create %s: %w", l.dir, err)
	}
	// The directory's own entry must survive a crash as its files do.
	if err := syncDir(l.fs, l.fs.PathDir(l.dir)); err != nil {
		return fmt.Errorf("wal: sync the parent of %s: %w", l.dir, err)
	}
	if r.unfinished != "" {
		if err := l.fs.Remove(r.unfinished); err != nil {
			return fmt.Errorf("wal: remove unfinished segment: %w", err)
		}
		l.logger.Warn("wal: removed a segment cut short by a crash", "segment", r.unfinished)
	}
	if r.fresh {
		return l.create(r.freshSeq)
	}
	for i, s := range l.segs {
		var f vfs.File
		var err error
		if i == len(l.segs)-1 {
			f, err = l.fs.OpenReadWrite(s.name, vfs.WriteCategoryUnspecified)
		} else {
			f, err = l.fs.Open(s.name)
		}
		if err != nil {
			return fmt.Errorf("wal: open %s: %w", s.name, err)
		}
		s.f = f
	}
	if r.tornEnd > r.tornAt {
		// Clear the torn bytes, so nothing of them can be read as a
		// frame once new frames are written in front of them.
		l.logger.Warn("wal: cut a torn tail", "segment", l.tail.name, "offset", r.tornAt, "bytes", r.tornEnd-r.tornAt)
		zeros := make([]byte, min(r.tornEnd-r.tornAt, 1<<20))
		for o := r.tornAt; o < r.tornEnd; o += int64(len(zeros)) {
			n := min(int64(len(zeros)), r.tornEnd-o)
			if _, err := l.tail.f.WriteAt(zeros[:n], o); err != nil {
				return fmt.Errorf("wal: clear torn tail: %w", err)
			}
		}
	}
	// What was read may have been in the page cache only (the process
	// died, not the machine). Make it durable before a new frame says so.
	if err := l.tail.f.SyncData(); err != nil {
		return fmt.Errorf("wal: sync %s: %w", l.tail.name, err)
	}
	l.synced = l.seq
	// Only now that the log proved whole without them.
	for _, name := range r.leftovers {
		if err := l.fs.Remove(name); err != nil {
			return fmt.Errorf("wal: remove leftover segment: %w", err)
		}
		l.logger.Info("wal: removed a segment compacted before a crash", "segment", name)
	}
	return nil
}

func (l *Log) readSegment(name string) ([]byte, error) {
	f, err := l.fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("wal: stat %s: %w", name, err)
	}
	data := make([]byte, st.Size())
	if n, err := f.ReadAt(data, 0); err != nil && (err != io.EOF || n != len(data)) {
		return nil, fmt.Errorf("wal: read %s: %w", name, err)
	}
	return data, nil
}
