package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Every envelope this package sends starts with a fixed header: the wire
// format version and a kind byte, so a member refuses what a newer member
// sends rather than misreading it (invariant 10 of ARCHITECTURE.md), then the
// cell ID and the sender's incarnation (identity.go), so a member refuses
// what another cell, or a member that lost its state, says (invariant 11).
//
// Version 1 had no cell ID or incarnation; it is refused.
const (
	wireVersion byte = 2
	headerLen        = 2 + 8 + 8
)

// header is what this member puts at the head of every envelope.
type header struct {
	cell        uint64
	incarnation uint64
}

func (h header) put(buf []byte, k wireKind) []byte {
	buf = append(buf, wireVersion, byte(k))
	buf = binary.BigEndian.AppendUint64(buf, h.cell)
	return binary.BigEndian.AppendUint64(buf, h.incarnation)
}

type wireKind byte

const (
	kindRaft     wireKind = 1 // a raftpb.Message
	kindChunk    wireKind = 2 // one chunk of a snapshot's state
	kindChunkAck wireKind = 3 // the receiver has staged a chunk
	kindApp      wireKind = 4 // an application message (session keep-alives)
	kindReject   wireKind = 5 // "I know you by another incarnation": you lost your state
	kindProbe    wireKind = 6 // "check my incarnation": nothing else (see rejected)
	kindRemoved  wireKind = 7 // "the cell removed you": target ID and incarnation (standing.go)
	kindPeerAddr wireKind = 8 // "answer me at this address": the sender's Raft ID and address (strangers.go)
)

var errWire = errors.New("raftnode: malformed envelope")

func (h header) encodeRaft(m *pb.Message) ([]byte, error) {
	buf := h.put(make([]byte, 0, headerLen+proto.Size(m)), kindRaft)
	return proto.MarshalOptions{}.MarshalAppend(buf, m)
}

// chunk is one piece of a snapshot in flight from leader to follower.
type chunk struct {
	From  uint64
	Index uint64 // the snapshot's index and term identify it
	Term  uint64
	Seq   uint64
	Last  bool
	Data  []byte
}

func (h header) encodeChunk(c *chunk) []byte {
	buf := h.put(make([]byte, 0, headerLen+5*binary.MaxVarintLen64+len(c.Data)), kindChunk)
	buf = binary.AppendUvarint(buf, c.From)
	buf = binary.AppendUvarint(buf, c.Index)
	buf = binary.AppendUvarint(buf, c.Term)
	buf = binary.AppendUvarint(buf, c.Seq)
	last := uint64(0)
	if c.Last {
		last = 1
	}
	buf = binary.AppendUvarint(buf, last)
	return append(buf, c.Data...)
}

// chunkAck acknowledges chunk Seq of the snapshot at Index/Term; OK is
// false when the receiver refused it (out of order, malformed).
type chunkAck struct {
	From  uint64
	Index uint64
	Term  uint64
	Seq   uint64
	OK    bool
}

func (h header) encodeAck(a *chunkAck) []byte {
	buf := h.put(make([]byte, 0, headerLen+5*binary.MaxVarintLen64), kindChunkAck)
	buf = binary.AppendUvarint(buf, a.From)
	buf = binary.AppendUvarint(buf, a.Index)
	buf = binary.AppendUvarint(buf, a.Term)
	buf = binary.AppendUvarint(buf, a.Seq)
	ok := uint64(0)
	if a.OK {
		ok = 1
	}
	return binary.AppendUvarint(buf, ok)
}

func (h header) encodeApp(data []byte) []byte {
	return append(h.put(make([]byte, 0, headerLen+len(data)), kindApp), data...)
}

func (h header) encodeReject() []byte {
	return h.put(make([]byte, 0, headerLen), kindReject)
}

func (h header) encodeProbe() []byte {
	return h.put(make([]byte, 0, headerLen), kindProbe)
}

// removedNotice tells a member that the cell removed it: Target is the
// Raft ID removed, Incarnation its data directory's as the sender knew
// it (0 if it never heard from it).
type removedNotice struct {
	Target      uint64
	Incarnation uint64
}

func (h header) encodeRemoved(r removedNotice) []byte {
	buf := h.put(make([]byte, 0, headerLen+2*binary.MaxVarintLen64), kindRemoved)
	buf = binary.AppendUvarint(buf, r.Target)
	return binary.AppendUvarint(buf, r.Incarnation)
}

// peerAddr is where the sender of a kindPeerAddr envelope takes its
// answers: its Raft ID and its transport address, as the cell's
// membership records them.
type peerAddr struct {
	ID   uint64
	Addr string
}

// maxPeerAddrLen bounds the address a kindPeerAddr envelope may carry
// (a host name is at most 253 bytes, a port 6 more).
const maxPeerAddrLen = 512

func (h header) encodePeerAddr(p peerAddr) []byte {
	buf := h.put(make([]byte, 0, headerLen+binary.MaxVarintLen64+len(p.Addr)), kindPeerAddr)
	buf = binary.AppendUvarint(buf, p.ID)
	return append(buf, p.Addr...)
}

// decoded is one received envelope: its header, and exactly one of the
// message fields set (none for a reject or a probe).
type decoded struct {
	header
	kind    wireKind
	raft    *pb.Message
	chunk   *chunk
	ack     *chunkAck
	app     []byte
	removed *removedNotice
	addr    *peerAddr
}

func decodeEnvelope(data []byte) (decoded, error) {
	if len(data) < 1 {
		return decoded{}, fmt.Errorf("%w: empty", errWire)
	}
	if data[0] != wireVersion {
		return decoded{}, fmt.Errorf("%w: unknown wire version %d", errWire, data[0])
	}
	if len(data) < headerLen {
		return decoded{}, fmt.Errorf("%w: %d bytes", errWire, len(data))
	}
	h := header{cell: binary.BigEndian.Uint64(data[2:10]), incarnation: binary.BigEndian.Uint64(data[10:18])}
	d, err := decodeBody(wireKind(data[1]), data[headerLen:])
	d.header, d.kind = h, wireKind(data[1])
	return d, err
}

func decodeBody(kind wireKind, body []byte) (decoded, error) {
	switch kind {
	case kindRaft:
		m, err := decodeRaft(body)
		if err != nil {
			return decoded{}, err
		}
		return decoded{raft: m}, nil
	case kindChunk:
		var v [5]uint64
		rest, err := readUvarints(body, v[:])
		if err != nil {
			return decoded{}, err
		}
		return decoded{chunk: &chunk{From: v[0], Index: v[1], Term: v[2], Seq: v[3], Last: v[4] == 1, Data: rest}}, nil
	case kindChunkAck:
		var v [5]uint64
		if _, err := readUvarints(body, v[:]); err != nil {
			return decoded{}, err
		}
		return decoded{ack: &chunkAck{From: v[0], Index: v[1], Term: v[2], Seq: v[3], OK: v[4] == 1}}, nil
	case kindApp:
		return decoded{app: body}, nil
	case kindRemoved:
		var v [2]uint64
		rest, err := readUvarints(body, v[:])
		if err != nil {
			return decoded{}, err
		}
		if len(rest) != 0 || v[0] == 0 {
			return decoded{}, fmt.Errorf("%w: malformed removal notice", errWire)
		}
		return decoded{removed: &removedNotice{Target: v[0], Incarnation: v[1]}}, nil
	case kindPeerAddr:
		var v [1]uint64
		rest, err := readUvarints(body, v[:])
		if err != nil {
			return decoded{}, err
		}
		if v[0] == 0 || len(rest) == 0 || len(rest) > maxPeerAddrLen {
			return decoded{}, fmt.Errorf("%w: malformed peer address", errWire)
		}
		return decoded{addr: &peerAddr{ID: v[0], Addr: string(rest)}}, nil
	case kindReject, kindProbe:
		if len(body) != 0 {
			return decoded{}, fmt.Errorf("%w: %d bytes after a bodiless kind %d", errWire, len(body), kind)
		}
		return decoded{}, nil
	default:
		return decoded{}, fmt.Errorf("%w: unknown kind %d", errWire, kind)
	}
}

func readUvarints(b []byte, out []uint64) ([]byte, error) {
	for i := range out {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad varint", errWire)
		}
		out[i] = v
		b = b[n:]
	}
	return b, nil
}
