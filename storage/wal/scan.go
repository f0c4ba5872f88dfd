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
// a torn tail unless a later readable frame says the bad one was synced,
// or there is no readable header and yet more than a header was written.
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
	case off == 0 && dataEnd > maxHeaderFrame:
		// A segment's header is synced before anything else is written
		// to it, so a crash can tear nothing but the header itself.
		// Bytes past where any header ends were written after it was
		// durable: the header was damaged, not torn (a copy of another
		// segment over this one looks so).
		return 0, 0, fmt.Errorf("wal: %s: no readable header, but %d bytes written: %w", s.name, dataEnd, ErrCorrupt)
	case off == 0:
		// Not even a header: the segment was cut short by a crash.
		return 0, dataEnd, nil
	}
	// A bad frame in the newest segment. Was it ever synced? Any frame
	// written after it names the last frame synced before it was, so a
	// readable one naming the bad frame or a later one proves the bad
	// frame was durable. Look at every frame boundary the bad frame's
	// length may have hidden, but checksum only a header that could be
	// such a frame: its sequence number within reach of the last good
	// frame's (one more per minFrame bytes at most), naming a frame at or
	// after the bad one as synced. Frames copied from another segment,
	// and payload bytes read as a header, almost never pass; checking
	// every "length" found in garbage against the whole preallocated
	// segment took minutes.
	budget := int64(len(data)) // checksummed bytes; no honest tail comes near
	for o := alignUp(off + 1); o < dataEnd; o += frameAlign {
		if !sc.mayNameSynced(data, off, o) {
			continue
		}
		if budget -= int64(binary.BigEndian.Uint32(data[o:])); budget < 0 {
			// Only bytes made to look like frames get here; a torn
			// tail cannot be told from damage among them.
			return 0, 0, fmt.Errorf("wal: %s: bad frame at offset %d, and more frame-like headers after it than can be checked: %w",
				s.name, off, ErrCorrupt)
		}
		if _, _, ok := readFrame(data, o, s.seq, &sc.crcBytes); ok {
			return 0, 0, fmt.Errorf("wal: %s: bad frame at offset %d, and the frame at %d says it was synced: %w",
				s.name, off, o, ErrCorrupt)
		}
	}
	return off, dataEnd, nil
}

// minFrame is the smallest a frame can be, padded; maxHeaderFrame the
// largest a segment's header can be: format version, truncation point
// and a hard state of three varint fields.
const (
	minFrame       = (frameHeaderLen + payloadHeadLen + frameAlign - 1) &^ (frameAlign - 1)
	maxHeaderFrame = (frameHeaderLen + payloadHeadLen + 3*8 + 4 + 3*(1+binary.MaxVarintLen64) + frameAlign - 1) &^ (frameAlign - 1)
)

// mayNameSynced reports whether the bytes at o, after the bad frame at
// off, have the header of a frame that says a frame at or after the bad
// one was synced, and a length that fits: the only frames worth their
// checksum in the search for a synced one.
func (sc *scan) mayNameSynced(data []byte, off, o int64) bool {
	if o+frameHeaderLen+payloadHeadLen > int64(len(data)) {
		return false
	}
	n := int64(binary.BigEndian.Uint32(data[o:]))
	if n < payloadHeadLen || o+frameHeaderLen+n > int64(len(data)) {
		return false
	}
	h := data[o+frameHeaderLen:]
	if kind := h[0]; kind != kindBatch && kind != kindCompact && kind != kindReset {
		return false
	}
	seq, synced := binary.BigEndian.Uint64(h[1:]), binary.BigEndian.Uint64(h[9:])
	// The bad frame is sc.seq+1; every frame between it and this one
	// takes minFrame bytes at least.
	return seq >= sc.seq+2 && seq-sc.seq-1 <= uint64((o-off)/minFrame) &&
		synced > sc.seq && synced < seq
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
