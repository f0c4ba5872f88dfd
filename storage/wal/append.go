package wal

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Append writes a hard state (nil or empty = unchanged) and entries in
// one frame, and syncs it if sync is set. Entries at or below the
// truncation point are skipped; an entry at or below the last index
// replaces it and every entry after it, as raft requires.
func (l *Log) Append(hs *pb.HardState, ents []*pb.Entry, sync bool) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return ErrClosed
	}
	for len(ents) > 0 && ents[0].GetIndex() <= l.trunc {
		ents = ents[1:]
	}
	if hs != nil && emptyHardState(hs) {
		hs = nil
	}
	if hs == nil && len(ents) == 0 {
		if sync {
			return l.syncLocked()
		}
		return nil
	}
	last := l.trunc + uint64(len(l.ents))
	if len(ents) > 0 && ents[0].GetIndex() > last+1 {
		return fmt.Errorf("wal: append at %d leaves a gap after last index %d", ents[0].GetIndex(), last)
	}

	f := &l.frame
	f.start(kindBatch)
	if err := f.hardState(hs); err != nil {
		return err
	}
	var first uint64
	if len(ents) > 0 {
		first = ents[0].GetIndex()
	}
	f.u64(first)
	f.u32(uint32(len(ents)))
	// Offsets of each entry within the frame; turned into positions once
	// the frame's place is known.
	ps := make([]pos, len(ents))
	for i, e := range ents {
		if e.GetIndex() != first+uint64(i) {
			return fmt.Errorf("wal: append: entry %d at position %d of a run from %d", e.GetIndex(), i, first)
		}
		f.u64(e.GetTerm())
		n := proto.Size(e)
		f.u32(uint32(n))
		ps[i] = pos{off: int64(len(f.b)), n: uint32(n), term: e.GetTerm()}
		var err error
		if f.b, err = (proto.MarshalOptions{}).MarshalAppend(f.b, e); err != nil {
			return fmt.Errorf("wal: encode entry %d: %w", e.GetIndex(), err)
		}
	}
	at, err := l.write(sync)
	if err != nil {
		return err
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if hs != nil {
		l.hs = proto.Clone(hs).(*pb.HardState)
	}
	if len(ents) > 0 {
		for i := range ps {
			ps[i].seg, ps[i].off = l.tail, at+ps[i].off
		}
		l.ents = append(l.ents[:first-l.trunc-1], ps...)
		l.tail.maxIndex = max(l.tail.maxIndex, first+uint64(len(ents))-1)
	}
	return nil
}

// Sync makes every frame written so far durable.
func (l *Log) Sync() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return ErrClosed
	}
	return l.syncLocked()
}

// Compact moves the truncation point to index, which must be at most the
// last index, and removes the segments holding only entries at or below
// it. Compacting to or below the truncation point does nothing.
func (l *Log) Compact(index uint64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return ErrClosed
	}
	last := l.trunc + uint64(len(l.ents))
	if index <= l.trunc {
		return nil
	}
	if index > last {
		return fmt.Errorf("wal: compact %d beyond last index %d", index, last)
	}
	term := l.ents[index-l.trunc-1].term
	drop := 0
	for drop < len(l.segs)-1 && l.segs[drop].maxIndex <= index {
		drop++
	}
	if err := l.mark(kindCompact, index, term, nil, drop > 0); err != nil {
		return err
	}

	l.mu.Lock()
	l.ents = l.ents[index-l.trunc:]
	if cap(l.ents) > 2*len(l.ents)+1024 {
		l.ents = append([]pos(nil), l.ents...) // let the dropped head go
	}
	l.trunc, l.truncTerm = index, term
	dropped := l.segs[:drop:drop]
	l.segs = l.segs[drop:]
	l.mu.Unlock()
	return l.remove(dropped)
}

// Reset discards every entry and sets the truncation point to index and
// term (a snapshot at index was installed), with hs if not nil, durably.
func (l *Log) Reset(index, term uint64, hs *pb.HardState) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if err := l.mark(kindReset, index, term, hs, true); err != nil {
		return err
	}
	l.mu.Lock()
	l.ents = nil
	l.trunc, l.truncTerm = index, term
	if hs != nil && !emptyHardState(hs) {
		l.hs = proto.Clone(hs).(*pb.HardState)
	}
	dropped := l.segs[: len(l.segs)-1 : len(l.segs)-1]
	l.segs = l.segs[len(l.segs)-1:]
	l.mu.Unlock()
	return l.remove(dropped)
}

// mark writes a compact or reset frame.
func (l *Log) mark(kind byte, index, term uint64, hs *pb.HardState, sync bool) error {
	f := &l.frame
	f.start(kind)
	f.u64(index)
	f.u64(term)
	if err := f.hardState(hs); err != nil {
		return err
	}
	_, err := l.write(sync)
	return err
}

// write puts the frame being built at the end of the log, cutting a new
// segment first if it does not fit, and returns its offset.
func (l *Log) write(sync bool) (int64, error) {
	if l.off+alignUp(int64(len(l.frame.b))) > l.segMax && l.tail.maxIndex > 0 {
		if err := l.cut(); err != nil {
			return 0, err
		}
	}
	// Numbered only now: cutting a segment writes a frame of its own.
	l.frame.number(l.seq+1, l.synced)
	b := l.frame.finish(l.tail.seq)
	at := l.off
	if _, err := l.tail.f.WriteAt(b, at); err != nil {
		return 0, fmt.Errorf("wal: write %s: %w", l.tail.name, err)
	}
	l.off += int64(len(b))
	l.seq++
	l.dirty = true
	if sync {
		if err := l.syncLocked(); err != nil {
			return 0, err
		}
	}
	return at, nil
}

func (l *Log) syncLocked() error {
	if !l.dirty {
		return nil
	}
	if err := l.tail.f.SyncData(); err != nil {
		return fmt.Errorf("wal: sync %s: %w", l.tail.name, err)
	}
	l.dirty = false
	l.synced = l.seq
	return nil
}

// cut seals the tail (synced, so a sealed segment is whole) and starts
// the next segment.
func (l *Log) cut() error {
	if err := l.syncLocked(); err != nil {
		return err
	}
	// The frame being built is kept aside while the header is written.
	pending := l.frame.b
	l.frame.b = nil
	err := l.create(l.tail.seq + 1)
	l.frame.b = append(l.frame.b[:0], pending...)
	return err
}

// create starts segment seq with its header, synced along with the
// directory entry, and makes it the tail.
func (l *Log) create(seq uint64) error {
	name := l.fs.PathJoin(l.dir, segmentName(seq))
	var f vfs.File
	prepared, err := l.takePrepared(name)
	switch {
	case err != nil:
		return err
	case prepared:
		f, err = l.fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			return fmt.Errorf("wal: open %s: %w", name, err)
		}
	default:
		if f, err = l.fs.Create(name, vfs.WriteCategoryUnspecified); err != nil {
			return fmt.Errorf("wal: create %s: %w", name, err)
		}
		if err := l.fill(f, false); err != nil {
			f.Close()
			return fmt.Errorf("wal: preallocate %s: %w", name, err)
		}
		if l.prep != nil {
			l.stats.InlineCuts++
		}
	}
	l.stats.Cuts++
	fr := frameBuf{}
	fr.start(kindHeader)
	fr.number(l.seq+1, l.synced)
	fr.u64(FormatVersion)
	fr.u64(l.trunc)
	fr.u64(l.truncTerm)
	if err := fr.hardState(l.hs); err != nil {
		f.Close()
		return err
	}
	b := fr.finish(seq)
	if _, err := f.WriteAt(b, 0); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.syncDir()
	}
	if err != nil {
		return fmt.Errorf("wal: start %s: %w", name, err)
	}
	if f, err = l.fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified); err != nil {
		return fmt.Errorf("wal: open %s: %w", name, err)
	}
	s := &segment{seq: seq, name: name, f: f}
	l.seq++
	l.synced = l.seq
	l.dirty = false
	l.off = int64(len(b))
	l.tail = s
	l.mu.Lock()
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	return nil
}

func (l *Log) syncDir() error { return syncDir(l.fs, l.dir) }

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// remove closes and deletes segments no longer needed. A failure leaves
// a file that the next Open reads and skips over, so it is only logged.
func (l *Log) remove(segs []*segment) error {
	for _, s := range segs {
		if err := s.f.Close(); err != nil {
			l.logger.Warn("wal: close dropped segment", "segment", s.name, "err", err)
		}
		if err := l.fs.Remove(s.name); err != nil {
			l.logger.Warn("wal: remove dropped segment", "segment", s.name, "err", err)
		}
	}
	return nil
}

func emptyHardState(hs *pb.HardState) bool {
	return hs.GetTerm() == 0 && hs.GetVote() == 0 && hs.GetCommit() == 0
}

// fill writes the new segment's zeros. Space that is only reserved
// (fallocate) is marked unwritten, and the first write to each block
// turns that mark into a journaled metadata change which every fdatasync
// then waits for; blocks already written are overwritten in place, so a
// sync is the data alone. The header is written over the first zeros.
//
// With syncEach set, each chunk is synced as it is written: the log's
// own fdatasyncs share the disk with these writes, and 32 MiB left to
// the kernel's writeback (or to one sync at the end) reach the disk in
// one burst that every commit behind it waits out; a chunk at a time
// bounds that wait to one chunk's write. The preparer sets it; an
// inline fill, on the commit path already, syncs once.
func (l *Log) fill(f vfs.File, syncEach bool) error {
	if err := f.Preallocate(0, l.segMax); err != nil {
		return err
	}
	zeros := make([]byte, min(l.segMax, fillChunk))
	for off := int64(0); off < l.segMax; off += int64(len(zeros)) {
		clear(zeros) // a file may scribble on what it was given to write
		if _, err := f.Write(zeros[:min(int64(len(zeros)), l.segMax-off)]); err != nil {
			return err
		}
		if syncEach {
			if err := f.SyncData(); err != nil {
				return err
			}
		}
	}
	return nil
}

// fillChunk is the size of fill's writes.
const fillChunk = 1 << 20
