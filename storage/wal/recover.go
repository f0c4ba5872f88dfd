package wal

import (
	"fmt"
	"io"
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

// recover reads every segment, checks it, and rebuilds the log's state.
func (l *Log) recover() error {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("wal: list %s: %w", l.dir, err)
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
		return l.create(1)
	}
	var leftovers []uint64
	// Compaction removes segments oldest first, but without a directory
	// sync after each removal a crash may bring some back: those before
	// the last gap are such leftovers. If what was lost in a gap was
	// still needed, replay finds entries missing and refuses the log.
	for i := len(seqs) - 1; i > 0; i-- {
		if seqs[i] == seqs[i-1]+1 {
			continue
		}
		leftovers, seqs = seqs[:i], seqs[i:]
		break
	}

	sc := &scan{}
	tornAt, tornEnd := int64(-1), int64(0)
	for i, seq := range seqs {
		last := i == len(seqs)-1
		s := &segment{seq: seq, name: l.fs.PathJoin(l.dir, segmentName(seq))}
		data, err := l.readSegment(s.name)
		if err != nil {
			return err
		}
		at, end, err := sc.segment(s, data, last, i == 0)
		if err != nil {
			return err
		}
		if at == 0 && last && i > 0 {
			// The newest segment has no readable header: a crash cut it
			// before its header was synced, so nothing in it was ever
			// acknowledged. The previous one is the tail again.
			if err := l.fs.Remove(s.name); err != nil {
				return fmt.Errorf("wal: remove unfinished segment: %w", err)
			}
			l.logger.Warn("wal: removed a segment cut short by a crash", "segment", s.name)
			break // the previous segment's end (tornAt) stands
		}
		if at == 0 {
			// The only segment, never begun: start afresh.
			if err := l.fs.Remove(s.name); err != nil {
				return fmt.Errorf("wal: remove unfinished segment: %w", err)
			}
			return l.create(seq)
		}
		tornAt, tornEnd = at, end
		l.segs = append(l.segs, s)
	}
	l.recovery.Segments = len(seqs)
	l.scanCRCBytes = sc.crcBytes

	// Open the files: the tail for writing, the rest for reading.
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
	l.tail = l.segs[len(l.segs)-1]
	l.seq = sc.seq
	l.off = tornAt
	if tornEnd > tornAt {
		// Clear the torn bytes, so nothing of them can be read as a
		// frame once new frames are written in front of them.
		l.recovery.TornBytes = tornEnd - tornAt
		l.logger.Warn("wal: cut a torn tail", "segment", l.tail.name, "offset", tornAt, "bytes", tornEnd-tornAt)
		zeros := make([]byte, min(tornEnd-tornAt, 1<<20))
		for o := tornAt; o < tornEnd; o += int64(len(zeros)) {
			n := min(int64(len(zeros)), tornEnd-o)
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
	if err := l.replay(sc); err != nil {
		return err
	}
	// Only now that the log proved whole without them.
	for _, seq := range leftovers {
		name := l.fs.PathJoin(l.dir, segmentName(seq))
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
