package wal

import (
	"fmt"

	"encoding/binary"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"hash/crc32"
)

// A segment is a sequence of frames, each starting at a multiple of
// frameAlign:
//
//	u32 payload length | u32 crc32c(segment seq, payload) | payload | zero padding
//
// A length of zero ends the segment's data: segments are preallocated,
// and preallocated space reads as zeros. Seeding the checksum with the
// segment's sequence number keeps a frame copied from (or left over in)
// another segment from passing as one of this segment's.
//
// Every payload starts with its kind, its frame sequence number (one
// more than the previous frame's, across segments) and the sequence
// number of the last frame known to be synced when it was written. The
// last field is what tells a torn tail from damage: a frame is only ever
// written after the frames it names as synced were, so a readable frame
// naming a damaged one as synced proves the damage is to data that was
// once durable.
const (
	frameHeaderLen = 8
	frameAlign     = 8
	payloadHeadLen = 1 + 8 + 8 // kind, seq, synced
)

// Frame kinds.
const (
	// kindHeader opens every segment: format version, the log's
	// truncation point and the hard state at the time the segment was
	// cut, so dropping older segments loses neither.
	kindHeader byte = 1
	// kindBatch is one Append: an optional hard state and a run of
	// consecutive entries.
	kindBatch byte = 2
	// kindCompact moves the truncation point forward, keeping the
	// entries after it.
	kindCompact byte = 3
	// kindReset discards every entry and sets the truncation point (a
	// snapshot was installed).
	kindReset byte = 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func frameCRC(segSeq uint64, payload []byte) uint32 {
	var seed [8]byte
	binary.BigEndian.PutUint64(seed[:], segSeq)
	return crc32.Update(crc32.Checksum(seed[:], crcTable), crcTable, payload)
}

// alignUp rounds n up to the frame alignment.
func alignUp(n int64) int64 { return (n + frameAlign - 1) &^ (frameAlign - 1) }

// frameBuf builds one frame in a reused buffer. The header is filled in
// by finish, once the payload is known.
type frameBuf struct {
	b []byte
}

// start begins a frame of the given kind; number fills in its sequence
// numbers before it is finished.
func (f *frameBuf) start(kind byte) {
	f.b = append(f.b[:0], make([]byte, frameHeaderLen+payloadHeadLen)...)
	f.b[frameHeaderLen] = kind
}

func (f *frameBuf) number(seq, synced uint64) {
	binary.BigEndian.PutUint64(f.b[frameHeaderLen+1:], seq)
	binary.BigEndian.PutUint64(f.b[frameHeaderLen+9:], synced)
}

func (f *frameBuf) u64(v uint64) { f.b = binary.BigEndian.AppendUint64(f.b, v) }
func (f *frameBuf) u32(v uint32) { f.b = binary.BigEndian.AppendUint32(f.b, v) }

func (f *frameBuf) bytes(p []byte) {
	f.u32(uint32(len(p)))
	f.b = append(f.b, p...)
}

// finish writes the header and pads the frame; it returns the frame.
func (f *frameBuf) finish(segSeq uint64) []byte {
	payload := f.b[frameHeaderLen:]
	binary.BigEndian.PutUint32(f.b[0:], uint32(len(payload)))
	binary.BigEndian.PutUint32(f.b[4:], frameCRC(segSeq, payload))
	for int64(len(f.b)) < alignUp(int64(len(f.b))) {
		f.b = append(f.b, 0)
	}
	return f.b
}

// readFrame returns the payload of the frame at off in data, and the
// offset of the next frame. ok is false for no frame: zeros, a short or
// overlong length, or a checksum mismatch. crcBytes counts the bytes
// checksummed.
func readFrame(data []byte, off int64, segSeq uint64, crcBytes *int64) (payload []byte, next int64, ok bool) {
	if off+frameHeaderLen+payloadHeadLen > int64(len(data)) {
		return nil, off, false
	}
	n := int64(binary.BigEndian.Uint32(data[off:]))
	if n < payloadHeadLen || off+frameHeaderLen+n > int64(len(data)) {
		return nil, off, false
	}
	payload = data[off+frameHeaderLen : off+frameHeaderLen+n]
	*crcBytes += n
	if binary.BigEndian.Uint32(data[off+4:]) != frameCRC(segSeq, payload) {
		return nil, off, false
	}
	return payload, alignUp(off + frameHeaderLen + n), true
}

// decoder reads a payload; any read past the end sets bad.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) u8() byte {
	if len(d.b) < 1 {
		d.bad = true
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) u32() uint32 {
	if len(d.b) < 4 {
		d.bad = true
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) bytes() []byte {
	n := int(d.u32())
	if d.bad || len(d.b) < n {
		d.bad = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// hardState appends hs, marshalled, or an empty field for none.
func (f *frameBuf) hardState(hs *pb.HardState) error {
	if hs == nil {
		f.u32(0)
		return nil
	}
	n := proto.Size(hs)
	f.u32(uint32(n))
	var err error
	f.b, err = (proto.MarshalOptions{}).MarshalAppend(f.b, hs)
	if err != nil {
		return fmt.Errorf("wal: encode hard state: %w", err)
	}
	return nil
}
