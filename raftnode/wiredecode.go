package raftnode

import (
	"fmt"
	"math"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The raft messages of the write path (appends and their responses,
// heartbeats, forwarded proposals, votes) are decoded here rather than by
// proto.Unmarshal, which allocates every optional scalar on its own and
// every entry and its data separately: on a put's path that was the
// largest share of a member's allocations after the state machine's.
// Here a message costs one allocation for itself and its scalars, one
// for its entries and theirs, one for the entry pointers and one for all
// the bytes it carries.
//
// The fast path only takes what it fully understands: the known fields,
// in the wire types the schema gives them, with known enum values. Any
// other input (a snapshot, storage responses, unknown fields or enum
// values, anything malformed) goes to proto.Unmarshal, so that what is
// accepted, what is refused and with which error stay proto's; for every
// input the fast path takes, the result equals proto's (tested with
// random and mutated messages in wiredecode_test.go).

// Field numbers of raftpb.Message and raftpb.Entry (raft.proto).
const (
	fMsgType       = 1
	fMsgTo         = 2
	fMsgFrom       = 3
	fMsgTerm       = 4
	fMsgLogTerm    = 5
	fMsgIndex      = 6
	fMsgEntries    = 7
	fMsgCommit     = 8
	fMsgReject     = 10
	fMsgRejectHint = 11
	fMsgContext    = 12
	fMsgVote       = 13

	fEntType  = 1
	fEntTerm  = 2
	fEntIndex = 3
	fEntData  = 4
)

// wireMsg is a message with room for its scalars: the pointers of the
// decoded message point into it.
type wireMsg struct {
	m      pb.Message
	u      [8]uint64 // to, from, term, logTerm, index, commit, rejectHint, vote
	typ    pb.MessageType
	reject bool
}

// wireEnt is an entry with room for its scalars.
type wireEnt struct {
	e           pb.Entry
	term, index uint64
	typ         pb.EntryType
}

// decodeRaft decodes a raft message from body.
func decodeRaft(body []byte) (*pb.Message, error) {
	ents, size, ok := scanMessage(body)
	if !ok {
		return unmarshalRaft(body)
	}
	return fillMessage(body, ents, size), nil
}

func unmarshalRaft(body []byte) (*pb.Message, error) {
	m := &pb.Message{}
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("%w: %v", errWire, err)
	}
	return m, nil
}

// scanMessage checks that body is a message the fast path takes, and
// counts its entries and the bytes they and the context carry.
func scanMessage(b []byte) (ents, size int, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		switch num {
		case fMsgType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || typ != protowire.VarintType || !knownEnum(v, pb.MessageType_name) {
				return 0, 0, false
			}
			b = b[n:]
		case fMsgTo, fMsgFrom, fMsgTerm, fMsgLogTerm, fMsgIndex, fMsgCommit, fMsgReject, fMsgRejectHint, fMsgVote:
			_, n := protowire.ConsumeVarint(b)
			if n < 0 || typ != protowire.VarintType {
				return 0, 0, false
			}
			b = b[n:]
		case fMsgEntries, fMsgContext:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || typ != protowire.BytesType {
				return 0, 0, false
			}
			b = b[n:]
			if num == fMsgContext {
				size += len(v)
				continue
			}
			k, ok := scanEntry(v)
			if !ok {
				return 0, 0, false
			}
			ents++
			size += k
		default:
			return 0, 0, false
		}
	}
	return ents, size, true
}

// scanEntry checks one entry as scanMessage does its message, and returns
// the bytes its data fields carry.
func scanEntry(b []byte) (size int, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		switch num {
		case fEntType, fEntTerm, fEntIndex:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || typ != protowire.VarintType || num == fEntType && !knownEnum(v, pb.EntryType_name) {
				return 0, false
			}
			b = b[n:]
		case fEntData:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || typ != protowire.BytesType {
				return 0, false
			}
			b = b[n:]
			size += len(v)
		default:
			return 0, false
		}
	}
	return size, true
}

// knownEnum reports whether v is a value of the enum whose names are
// given; proto keeps any other value of a closed enum as an unknown field.
func knownEnum(v uint64, names map[int32]string) bool {
	if v > math.MaxInt32 {
		return false
	}
	_, ok := names[int32(v)]
	return ok
}

// fillMessage decodes b, which scanMessage accepted with the counts given.
// Scalars repeated on the wire take the last value, as proto's do.
func fillMessage(b []byte, nents, size int) *pb.Message {
	w := &wireMsg{}
	m := &w.m
	var ents []wireEnt
	if nents > 0 {
		ents = make([]wireEnt, nents)
		m.Entries = make([]*pb.Entry, 0, nents)
	}
	var data []byte
	if size > 0 {
		data = make([]byte, 0, size)
	}
	for len(b) > 0 {
		num, _, n := protowire.ConsumeTag(b)
		b = b[n:]
		var v uint64
		if num == fMsgEntries || num == fMsgContext {
			raw, n := protowire.ConsumeBytes(b)
			b = b[n:]
			if num == fMsgContext {
				m.Context, data = carve(data, raw)
				continue
			}
			e := &ents[len(m.Entries)]
			data = fillEntry(e, raw, data)
			m.Entries = append(m.Entries, &e.e)
			continue
		}
		v, n = protowire.ConsumeVarint(b)
		b = b[n:]
		switch num {
		case fMsgType:
			w.typ = pb.MessageType(v)
			m.Type = &w.typ
		case fMsgTo:
			w.u[0], m.To = v, &w.u[0]
		case fMsgFrom:
			w.u[1], m.From = v, &w.u[1]
		case fMsgTerm:
			w.u[2], m.Term = v, &w.u[2]
		case fMsgLogTerm:
			w.u[3], m.LogTerm = v, &w.u[3]
		case fMsgIndex:
			w.u[4], m.Index = v, &w.u[4]
		case fMsgCommit:
			w.u[5], m.Commit = v, &w.u[5]
		case fMsgRejectHint:
			w.u[6], m.RejectHint = v, &w.u[6]
		case fMsgVote:
			w.u[7], m.Vote = v, &w.u[7]
		case fMsgReject:
			w.reject, m.Reject = v != 0, &w.reject
		}
	}
	return m
}

// fillEntry decodes one entry scanEntry accepted into e, its data carved
// from data; it returns the rest of data.
func fillEntry(e *wireEnt, b, data []byte) []byte {
	for len(b) > 0 {
		num, _, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num == fEntData {
			raw, n := protowire.ConsumeBytes(b)
			b = b[n:]
			e.e.Data, data = carve(data, raw)
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		b = b[n:]
		switch num {
		case fEntType:
			e.typ, e.e.Type = pb.EntryType(v), &e.typ
		case fEntTerm:
			e.term, e.e.Term = v, &e.term
		case fEntIndex:
			e.index, e.e.Index = v, &e.index
		}
	}
	return data
}

// carve copies raw to the end of data, whose capacity scanMessage made
// sufficient, and returns the copy, capped so that an append to it cannot
// reach the next one. The copy is never nil: a field that is present but
// empty reads as present, as proto's does.
func carve(data, raw []byte) (field, rest []byte) {
	if data == nil {
		return []byte{}, nil
	}
	l := len(data)
	data = append(data, raw...)
	return data[l:len(data):len(data)], data
}
