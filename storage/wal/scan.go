package wal

import (
	"encoding/binary"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// segment reads one segment's frames into sc. It returns the offset
// where its frames end (0 if it has no readable header) and, for a torn
// tail, the end of the non-zero bytes after that.
//
// Frames must follow each other by sequence number, across segments
// too, so a frame lost from the middle of the log is seen. In a sealed
// segment everything after the last frame must be zeros (it was synced
// whole before the next one was cut). In the newest one, a bad frame is
// a torn tail unless a later readable frame says the bad one was synced.
func (sc *scan) segment(s *segment, data []byte, last, first bool) (at, end int64, err error) {
	off := int64(0)
	for {
		payload, next, ok := readFrame(data, off, s.seq, &sc.crcBytes)
		if !ok {
			break
		}
		if err := sc.frame(s, payload, off+frameHeaderLen, off == 0, first && off == 0); err != nil {
			return 0, 0, fmt.Errorf("wal: %s at offset %d: %w", s.name, off, err)
		}
		off = next
	}
	dataEnd := int64(len(data))
	for dataEnd > off && data[dataEnd-1] == 0 {
		dataEnd--
	}
	switch {
	case dataEnd == off:
		return off, off, nil
	case !last:
		return 0, 0, fmt.Errorf("wal: %s: bad frame at offset %d in a sealed segment: %w", s.name, off, ErrCorrupt)
	}
	// A bad frame in the newest segment. Was it ever synced?
	for o := alignUp(off + 1); o < dataEnd; o += frameAlign {
		payload, _, ok := readFrame(data, o, s.seq, &sc.crcBytes)
		if !ok || len(payload) < payloadHeadLen {
			continue
		}
		if synced := binary.BigEndian.Uint64(payload[9:]); synced > sc.seq {
			return 0, 0, fmt.Errorf("wal: %s: bad frame at offset %d, and the frame at %d says it was synced: %w",
				s.name, off, o, ErrCorrupt)
		}
	}
	if off == 0 {
		// Not even a header: the segment was cut short by a crash.
		return 0, dataEnd, nil
	}
	return off, dataEnd, nil
}

// frame records one good frame.
func (sc *scan) frame(s *segment, payload []byte, payloadOff int64, isHeader, first bool) error {
	d := decoder{b: payload}
	kind, seq, synced := d.u8(), d.u64(), d.u64()
	if isHeader != (kind == kindHeader) {
		return fmt.Errorf("frame of kind %d where a header %s: %w", kind,
			map[bool]string{true: "belongs", false: "does not belong"}[isHeader], ErrCorrupt)
	}
	if !first && seq != sc.seq+1 {
		return fmt.Errorf("frame %d follows frame %d: %w", seq, sc.seq, ErrCorrupt)
	}
	if synced >= seq {
		return fmt.Errorf("frame %d claims frame %d synced: %w", seq, synced, ErrCorrupt)
	}
	sc.seq = seq
	switch kind {
	case kindHeader:
		version, index, term := d.u64(), d.u64(), d.u64()
		hs := d.bytes()
		if !d.bad && version != FormatVersion {
			return fmt.Errorf("segment version %d, this build reads %d: %w", version, FormatVersion, ErrFormat)
		}
		if err := sc.hardState(hs); err != nil {
			return err
		}
		sc.ops = append(sc.ops, op{kind: kindCompact, index: index, term: term, seg: s})
	case kindBatch:
		hs := d.bytes()
		if err := sc.hardState(hs); err != nil {
			return err
		}
		firstIndex, n := d.u64(), int(d.u32())
		lo := len(sc.positions)
		for i := 0; i < n && !d.bad; i++ {
			term := d.u64()
			ent := d.bytes()
			if d.bad {
				break
			}
			at := payloadOff + int64(len(payload)-len(d.b)-len(ent))
			sc.positions = append(sc.positions, pos{seg: s, off: at, n: uint32(len(ent)), term: term})
		}
		if n > 0 {
			s.maxIndex = max(s.maxIndex, firstIndex+uint64(n)-1)
		}
		sc.ops = append(sc.ops, op{kind: kindBatch, index: firstIndex, lo: lo, hi: len(sc.positions), seg: s})
	case kindCompact, kindReset:
		index, term := d.u64(), d.u64()
		if err := sc.hardState(d.bytes()); err != nil {
			return err
		}
		sc.ops = append(sc.ops, op{kind: kind, index: index, term: term, seg: s})
	default:
		return fmt.Errorf("unknown frame kind %d: %w", kind, ErrCorrupt)
	}
	if d.bad || len(d.b) != 0 {
		return fmt.Errorf("frame %d (kind %d) malformed: %w", seq, kind, ErrCorrupt)
	}
	return nil
}

func (sc *scan) hardState(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	hs := &pb.HardState{}
	if err := proto.Unmarshal(b, hs); err != nil {
		return fmt.Errorf("hard state: %v: %w", err, ErrCorrupt)
	}
	sc.hs = hs
	return nil
}

// replay rebuilds the log from the frames in order. The truncation point
// only moves forward, and segments are dropped only once a later frame
// has moved it past all their entries, so the highest truncation point
// found is where the log starts, and every entry at or below it is gone.
func (l *Log) replay(sc *scan) error {
	for _, o := range sc.ops {
		if o.kind != kindBatch && o.index >= l.trunc {
			l.trunc, l.truncTerm = o.index, o.term
		}
	}
	last := l.trunc
	for _, o := range sc.ops {
		switch o.kind {
		case kindReset:
			l.ents = l.ents[:0]
			last = l.trunc
		case kindBatch:
			if n := uint64(o.hi - o.lo); n > 0 && o.index+n-1 <= l.trunc {
				// Every entry of this append is below the log's start
				// now, but when it was written it cut off the entries
				// after it: so must its replay.
				l.ents = l.ents[:0]
				last = l.trunc
				continue
			}
			for k, p := range sc.positions[o.lo:o.hi] {
				idx := o.index + uint64(k)
				switch {
				case idx <= l.trunc:
					continue
				case idx > last+1:
					return fmt.Errorf("wal: entry %d follows entry %d: %w", idx, last, ErrCorrupt)
				}
				l.ents = append(l.ents[:idx-l.trunc-1], p)
				last = idx
			}
		}
	}
	l.hs = sc.hs
	return nil
}
