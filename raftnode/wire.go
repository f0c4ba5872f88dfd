package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Every envelope this package sends starts with the wire format version
// and a kind byte, so a member refuses what a newer member sends rather
// than misreading it (invariant 10 of DESIGN.md).
const wireVersion byte = 1

type wireKind byte

const (
	kindRaft     wireKind = 1 // a raftpb.Message
	kindChunk    wireKind = 2 // one chunk of a snapshot's state
	kindChunkAck wireKind = 3 // the receiver has staged a chunk
	kindApp      wireKind = 4 // an application message (session keep-alives)
)

var errWire = errors.New("raftnode: malformed envelope")

func encodeRaft(m *pb.Message) ([]byte, error) {
	buf := make([]byte, 2, 2+proto.Size(m))
	buf[0], buf[1] = wireVersion, byte(kindRaft)
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

func encodeChunk(c *chunk) []byte {
	buf := make([]byte, 0, 2+5*binary.MaxVarintLen64+len(c.Data))
	buf = append(buf, wireVersion, byte(kindChunk))
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

func encodeAck(a *chunkAck) []byte {
	buf := make([]byte, 0, 2+5*binary.MaxVarintLen64)
	buf = append(buf, wireVersion, byte(kindChunkAck))
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

func encodeApp(data []byte) []byte {
	return append([]byte{wireVersion, byte(kindApp)}, data...)
}

// decoded is one received envelope; exactly one field is set.
type decoded struct {
	raft  *pb.Message
	chunk *chunk
	ack   *chunkAck
	app   []byte
}

func decodeEnvelope(data []byte) (decoded, error) {
	if len(data) < 2 {
		return decoded{}, fmt.Errorf("%w: %d bytes", errWire, len(data))
	}
	if data[0] != wireVersion {
		return decoded{}, fmt.Errorf("%w: unknown wire version %d", errWire, data[0])
	}
	body := data[2:]
	switch wireKind(data[1]) {
	case kindRaft:
		m := &pb.Message{}
		if err := proto.Unmarshal(body, m); err != nil {
			return decoded{}, fmt.Errorf("%w: %v", errWire, err)
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
	default:
		return decoded{}, fmt.Errorf("%w: unknown kind %d", errWire, data[1])
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
