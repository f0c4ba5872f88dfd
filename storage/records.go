package storage

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/wirebytes"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrCorrupt is returned when a record of a known format does not decode:
// the disk (or a peer's snapshot) holds bytes this code never wrote.
var ErrCorrupt = errors.New("storage: corrupt record")

// Record formats. Every value the state machine persists or sends starts
// with one of these bytes, so that a later layout can be told apart from
// this one and a node refuses, clearly, a record it does not understand
// (invariant 10 of ARCHITECTURE.md). They are hand-rolled varint encodings rather
// than msgpack because KV and history records are written for every put.
const (
	metaFormat1     byte = 1
	confFormat1     byte = 1
	kvFormat1       byte = 1
	sessionFormat1  byte = 1 // TTL and unheard time
	sessionFormat2  byte = 2 // and the owner: a client's session
	sessionFormat3  byte = 3 // and flags: charged to the quota, silence mark
	clockFormat1    byte = 1 // the session clock
	historyFormat1  byte = 1 // events without their previous state
	historyFormat2  byte = 2 // events with their previous state
	chunkFormat1    byte = 1
	snapDataFormat1 byte = 1
)

// Meta keys, under prefixStateMeta. The applied record changes with every
// Apply; the conf state only with membership, so it has its own key and is
// rewritten only when it changes.
var (
	metaAppliedKey = []byte{prefixStateMeta, 'a'}
	metaConfKey    = []byte{prefixStateMeta, 'c'}
	// metaClockKey holds the session clock (command.KindSessionSilent),
	// rewritten only when a leader moves it; absent = zero.
	metaClockKey = []byte{prefixStateMeta, 's'}
)

func appendClock(dst []byte, clock int64) []byte {
	return binary.AppendUvarint(append(dst, clockFormat1), uint64(clock))
}

func decodeClock(b []byte) (int64, error) {
	r, err := newRecord(b, clockFormat1, "session clock")
	if err != nil {
		return 0, err
	}
	c := int64(r.Uvarint())
	if c < 0 {
		r.Fail("negative session clock")
	}
	return c, recordDone(&r, "session clock")
}

// smMeta is the state machine's bookkeeping, stored under metaAppliedKey in
// the same batch as the changes it describes.
type smMeta struct {
	index  uint64 // last applied raft index
	term   uint64 // its term
	rev    int64  // cell revision
	size   int64  // Σ len(key)+len(value) over live keys, for the quota
	oldest int64  // oldest revision retained in the history (rev+1 if none)
}

func appendMeta(dst []byte, m smMeta) []byte {
	dst = append(dst, metaFormat1)
	dst = binary.AppendUvarint(dst, m.index)
	dst = binary.AppendUvarint(dst, m.term)
	dst = binary.AppendUvarint(dst, uint64(m.rev))
	dst = binary.AppendUvarint(dst, uint64(m.size))
	return binary.AppendUvarint(dst, uint64(m.oldest))
}

func decodeMeta(b []byte) (smMeta, error) {
	r, err := newRecord(b, metaFormat1, "meta")
	if err != nil {
		return smMeta{}, err
	}
	m := smMeta{
		index:  r.Uvarint(),
		term:   r.Uvarint(),
		rev:    int64(r.Uvarint()),
		size:   int64(r.Uvarint()),
		oldest: int64(r.Uvarint()),
	}
	return m, recordDone(&r, "meta")
}

func encodeConf(cs *pb.ConfState) ([]byte, error) {
	if cs == nil {
		cs = &pb.ConfState{}
	}
	// Deterministic so that every member writes identical bytes, and the
	// state range of two members can be compared byte for byte.
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cs)
	if err != nil {
		return nil, fmt.Errorf("storage: encode conf state: %w", err)
	}
	return append([]byte{confFormat1}, b...), nil
}

func decodeConf(b []byte) (*pb.ConfState, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty conf state", ErrCorrupt)
	}
	if b[0] != confFormat1 {
		return nil, fmt.Errorf("%w: conf state record format %d", ErrFormat, b[0])
	}
	cs := &pb.ConfState{}
	if err := proto.Unmarshal(b[1:], cs); err != nil {
		return nil, fmt.Errorf("%w: conf state: %v", ErrCorrupt, err)
	}
	return cs, nil
}

// appendKVKey appends the storage key of a user key.
func appendKVKey(dst []byte, key string) []byte {
	return append(append(dst, prefixKV), key...)
}

// appendKVRecord appends the stored form of kv. The value goes last and
// unprefixed: it runs to the end of the record.
func appendKVRecord(dst []byte, kv *command.KV) []byte {
	dst = append(dst, kvFormat1)
	dst = binary.AppendUvarint(dst, uint64(kv.Version))
	dst = binary.AppendUvarint(dst, uint64(kv.CreateRev))
	dst = binary.AppendUvarint(dst, uint64(kv.ModRev))
	dst = binary.AppendUvarint(dst, uint64(kv.Session))
	return append(dst, kv.Value...)
}

// decodeKVRecord fills every field of kv but Key from b. kv.Value aliases
// b: callers copy it when b does not outlive them.
func decodeKVRecord(b []byte, kv *command.KV) error {
	r, err := newRecord(b, kvFormat1, "kv")
	if err != nil {
		return err
	}
	kv.Version = int64(r.Uvarint())
	kv.CreateRev = int64(r.Uvarint())
	kv.ModRev = int64(r.Uvarint())
	kv.Session = int64(r.Uvarint())
	kv.Value = r.Take(r.Len())
	return recordDone(&r, "kv")
}

// appendSessionKey appends the key of a session record: big-endian IDs
// keep sessions in creation order.
func appendSessionKey(dst []byte, id int64) []byte {
	return appendUint64(append(dst, prefixSession), uint64(id))
}

// appendOwnedKey appends the key of one entry of the session→key index.
func appendOwnedKey(dst []byte, id int64, key string) []byte {
	return append(appendUint64(append(dst, prefixSessionKey), uint64(id)), key...)
}

// Flags of a session record of format 3.
const (
	sessionCharged byte = 1 << 0 // its bytes count against the quota
	sessionMarked  byte = 1 << 1 // found silent: a silence mark follows
)

// appendSessionRecord encodes a session: its TTL and its unheard time
// (both nanoseconds), for a client's session its owner, and whether it
// counts against the quota and since when it has been silent. A session
// that neither counts nor is marked silent (one an older build created)
// is written in format 1 without an owner and 2 with one, byte for byte
// as before; every other in format 3, so only sessions this build
// created or marked need a build that knows it.
func appendSessionRecord(dst []byte, it sessionItem) []byte {
	var flags byte
	if it.charged {
		flags |= sessionCharged
	}
	if it.marked {
		flags |= sessionMarked
	}
	format := sessionFormat1
	switch {
	case flags != 0:
		format = sessionFormat3
	case it.owner != "":
		format = sessionFormat2
	}
	dst = binary.AppendUvarint(append(dst, format), uint64(it.ttl))
	dst = binary.AppendUvarint(dst, uint64(it.unheard))
	if format != sessionFormat1 {
		dst = wirebytes.AppendString(dst, it.owner)
	}
	if format == sessionFormat3 {
		dst = append(dst, flags)
		if it.marked {
			dst = binary.AppendUvarint(dst, uint64(it.mark))
		}
	}
	return dst
}

// sessionCost is what a charged session counts against the quota: the
// bytes of its key and of its record as created (unheard time zero, not
// marked). It depends only on what never changes, so every member counts
// the same whatever the session's bookkeeping since.
func sessionCost(ttl int64, owner string) int64 {
	const keyLen = 1 + 8
	return keyLen + 1 + int64(wirebytes.UvarintLen(uint64(ttl))) + 1 + int64(wirebytes.StringLen(owner)) + 1
}

// decodeSessionRecord reads a session record of format 1, 2 or 3 into it
// (all but its ID, which is the record's key).
func decodeSessionRecord(b []byte, it *sessionItem) error {
	format := sessionFormat1
	if len(b) > 0 && (b[0] == sessionFormat2 || b[0] == sessionFormat3) {
		format = b[0]
	}
	r, err := newRecord(b, format, "session")
	if err != nil {
		return err
	}
	it.ttl = int64(r.Uvarint())
	it.unheard = int64(r.Uvarint())
	it.owner, it.charged, it.marked, it.mark = "", false, false, 0
	switch format {
	case sessionFormat2:
		// Format 2 is only for an owner: one encoding per session.
		if it.owner = r.Str(); it.owner == "" {
			r.Fail("format 2 without an owner")
		}
	case sessionFormat3:
		it.owner = r.Str()
		flags := r.U8()
		if flags == 0 || flags&^(sessionCharged|sessionMarked) != 0 {
			r.Fail("format 3 with flags %#x", flags)
		}
		it.charged, it.marked = flags&sessionCharged != 0, flags&sessionMarked != 0
		if it.marked {
			it.mark = int64(r.Uvarint())
		}
	}
	if it.mark < 0 {
		r.Fail("silence mark past the clock's range")
	}
	return recordDone(&r, "session")
}

func appendHistoryKey(dst []byte, rev int64) []byte {
	return appendUint64(append(dst, prefixHistory), uint64(rev))
}

// appendHistoryRecord appends the stored form of one revision's events,
// each with the key's previous state (for watches WithPrevKV).
func appendHistoryRecord(dst []byte, events []Event) []byte {
	dst = append(dst, historyFormat2)
	dst = binary.AppendUvarint(dst, uint64(len(events)))
	for i := range events {
		ev := &events[i]
		dst = append(dst, byte(ev.Type))
		dst = wirebytes.AppendString(dst, ev.KV.Key)
		dst = wirebytes.AppendString(dst, ev.KV.Value)
		dst = binary.AppendUvarint(dst, uint64(ev.KV.Version))
		dst = binary.AppendUvarint(dst, uint64(ev.KV.CreateRev))
		dst = binary.AppendUvarint(dst, uint64(ev.KV.Session))
		if p := ev.Prev; p != nil {
			dst = append(dst, 1)
			dst = wirebytes.AppendString(dst, p.Value)
			dst = binary.AppendUvarint(dst, uint64(p.Version))
			dst = binary.AppendUvarint(dst, uint64(p.CreateRev))
			dst = binary.AppendUvarint(dst, uint64(p.ModRev))
			dst = binary.AppendUvarint(dst, uint64(p.Session))
		} else {
			dst = append(dst, 0)
		}
	}
	return dst
}

// decodeHistoryRecord decodes the events of revision rev, in either
// format (records written before format 2 carry no previous state). The
// values it returns alias b, which the caller must own (not an iterator's
// buffer).
func decodeHistoryRecord(rev int64, b []byte) ([]Event, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty history record", ErrCorrupt)
	}
	format := b[0]
	if format != historyFormat1 && format != historyFormat2 {
		return nil, fmt.Errorf("%w: history record format %d", ErrFormat, format)
	}
	r := wirebytes.NewReader(b[1:], ErrCorrupt)
	// Each event takes at least 6 bytes, so a bad count cannot size a
	// huge allocation.
	n := r.Count(6)
	var events []Event
	if r.Err() == nil {
		events = make([]Event, n)
	}
	for i := range events {
		ev := &events[i]
		ev.Type = EventType(r.U8())
		if ev.Type != EventPut && ev.Type != EventDelete {
			r.Fail("event type %d", ev.Type)
		}
		ev.KV.Key = r.Str()
		if v := r.Slice(); len(v) > 0 {
			ev.KV.Value = v
		}
		ev.KV.Version = int64(r.Uvarint())
		ev.KV.CreateRev = int64(r.Uvarint())
		ev.KV.Session = int64(r.Uvarint())
		ev.KV.ModRev = rev
		if format == historyFormat2 && r.U8() == 1 {
			p := &command.KV{Key: ev.KV.Key}
			if v := r.Slice(); len(v) > 0 {
				p.Value = v
			}
			p.Version = int64(r.Uvarint())
			p.CreateRev = int64(r.Uvarint())
			p.ModRev = int64(r.Uvarint())
			p.Session = int64(r.Uvarint())
			ev.Prev = p
		}
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("history record of revision %d: %w", rev, err)
	}
	return events, nil
}

// newRecord checks the leading format byte of a record named what and
// returns a reader of the rest; its errors wrap ErrCorrupt. Record
// varints need not be minimal: these formats never promised one encoding.
func newRecord(b []byte, format byte, what string) (wirebytes.Reader, error) {
	if len(b) == 0 {
		return wirebytes.Reader{}, fmt.Errorf("%w: empty %s record", ErrCorrupt, what)
	}
	if b[0] != format {
		return wirebytes.Reader{}, fmt.Errorf("%w: %s record format %d, want %d", ErrFormat, what, b[0], format)
	}
	return wirebytes.NewReader(b[1:], ErrCorrupt), nil
}

// recordDone reports whether the record decoded exactly, with nothing left over.
func recordDone(r *wirebytes.Reader, what string) error {
	if err := r.Done(); err != nil {
		return fmt.Errorf("%s record: %w", what, err)
	}
	return nil
}

// prefixEnd returns the smallest key greater than every key starting with
// p, or nil if there is none (p is all 0xff). Every key of ours starts with
// a prefix byte below 0xff, so for them it is never nil.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
