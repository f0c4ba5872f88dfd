package clientwire

import (
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// Kind identifies a frame's message. Numbers are stable: a kind keeps its
// number and layout within a protocol version.
type Kind uint8

// The kinds. Requests carry a request ID and are answered by a response
// with the same ID; the other frames carry ID 0 except Cancel, whose ID
// names the request to cancel.
const (
	KindHello         Kind = 1  // client → member, handshake
	KindWelcome       Kind = 2  // member → client, handshake accepted
	KindRefuse        Kind = 3  // member → client, handshake refused
	KindPing          Kind = 4  // request → Pong
	KindPong          Kind = 5  // response
	KindPropose       Kind = 6  // request → ProposeResult
	KindProposeResult Kind = 7  // response
	KindRead          Kind = 8  // request → ReadResult
	KindReadResult    Kind = 9  // response
	KindWatchStart    Kind = 10 // request → OK, then stream frames
	KindOK            Kind = 11 // response without a body
	KindWatchEvents   Kind = 12 // member → client, stream
	KindWatchProgress Kind = 13 // member → client, stream
	KindWatchEnd      Kind = 14 // member → client, stream, last of its watch
	KindWatchCancel   Kind = 15 // client → member, one-way
	KindKeepAlive     Kind = 16 // client → member, one-way
	KindKeepAliveAck  Kind = 17 // member → client, stream
	KindError         Kind = 18 // response: the request failed
	KindCancel        Kind = 19 // client → member, one-way: abandon request ID
	// Version 2.
	KindTimeToLive       Kind = 20 // request → TimeToLiveResult
	KindTimeToLiveResult Kind = 21 // response

	maxKindV1 = KindCancel
	maxKind   = KindWatchesCurrent
)

// Message is one of the message structs of this file.
type Message interface {
	// Kind is the frame kind the message travels as.
	Kind() Kind
	appendTo(b []byte) []byte
	decode(d *dec)
}

// Hello opens a connection (client → member). Its layout is frozen across
// protocol versions, so any two builds can agree on a version.
type Hello struct {
	MinVersion, MaxVersion uint8
	// Name is the client's name, for logs; the member trusts only the
	// identity its transport authenticated.
	Name string
	// MaxFrame is the largest frame the client accepts; the member fails
	// a response that would be longer rather than send it.
	MaxFrame uint32
}

// Welcome accepts a connection (member → client).
type Welcome struct {
	Version         uint8 // the protocol version both ends now speak
	Member          string
	CellID          uint64
	ElectionTimeout time.Duration
	MinSessionTTL   time.Duration
	// The member's limits for this client: the largest frame it reads,
	// the requests it runs at once, the watches it keeps.
	MaxFrame    uint32
	MaxInFlight uint32
	MaxWatchers uint32
}

// Refuse declines a connection (member → client); the member closes it
// after sending.
type Refuse struct {
	Reason  RefuseReason
	Message string
}

// Ping asks the member to answer Pong: a liveness probe.
type Ping struct{}

// Pong answers Ping.
type Pong struct{}

// OK answers a request that has no result (WatchStart).
type OK struct{}

// Propose asks the member to propose a command to Raft and wait for it
// to apply. Command is in internal/command's encoding; the member decodes
// and checks it before anything else.
type Propose struct {
	Command []byte
}

// ProposeResult is the applied command's result.
type ProposeResult struct {
	Result command.Result
	// Nested marks a result with nested transactions' results (version
	// 6, nested.go), which travels as KindNestedResult.
	Nested bool
}

// Read reads a key, or every key under a prefix. Linearizable unless
// Serializable.
type Read struct {
	Key          string
	Prefix       bool
	Serializable bool
	// After and Limit page a prefix read (version 4, readpage.go): only
	// the keys after After, at most Limit of them (0: no limit). A Read
	// with either travels as KindReadPage.
	After string
	Limit uint32
	// page tells decode that the payload is a KindReadPage one; decode
	// clears it, so a page of everything (no After, no Limit) is the
	// plain prefix read it means.
	page bool
	// Ranged makes the read a ranged one (version 5, readrange.go) with
	// Range's options; it travels as KindReadRange.
	Ranged bool
	Range  RangeOptions
}

// ReadResult holds the keys found and the revision read at.
type ReadResult struct {
	KVs []command.KV
	Rev int64
	// Ranged marks the answer to a ranged read (KindRangeResult, version
	// 5), which also carries Count (when asked for) and CompactRev:
	// when not 0, the read's revision was older than the member's
	// history, whose oldest revision it is, and nothing was read.
	Ranged     bool
	Count      int64
	CompactRev int64
}

// WatchStart starts a watch of every key under Prefix. WatchID is chosen
// by the client, unique among its open watches on this connection.
type WatchStart struct {
	WatchID     uint64
	Prefix      string
	FromRev     int64 // 0: from now
	PrevKV      bool
	PutsOnly    bool
	DeletesOnly bool
	// ProgressInterval asks for a WatchProgress when the watch was quiet
	// that long; 0 = never.
	ProgressInterval time.Duration
	// MaxLag is how far behind (in revisions) the watch may fall before
	// the member ends it as slow; 0 = the member's default.
	MaxLag int64
}

// EventType is the type of a watch event.
type EventType uint8

// The event types (the root package's EventPut and EventDelete).
const (
	EventPut    EventType = 1
	EventDelete EventType = 2
)

// Event is one change seen by a watch.
type Event struct {
	Type     EventType
	KV       command.KV
	PrevKV   *command.KV // set only for watches with PrevKV, and when there was one
	EndOfRev bool        // the last event of its revision for this watch
}

// WatchEvents carries changes of one watch, in revision order; Rev is the
// revision of the last one.
type WatchEvents struct {
	WatchID uint64
	Events  []Event
	Rev     int64
}

// WatchProgress says the watch has delivered every change up to Rev.
type WatchProgress struct {
	WatchID uint64
	Rev     int64
}

// WatchEnd is the last frame of a watch. Code is CodeNone after a
// WatchCancel; CodeCompacted with CompactRev when FromRev was compacted;
// CodeSlowWatcher when the client fell behind. Rev is the revision the
// watch had delivered up to: resume from Rev+1.
type WatchEnd struct {
	WatchID    uint64
	Code       Code
	Message    string
	CompactRev int64
	Rev        int64
}

// WatchCancel ends a watch; the member answers with its WatchEnd.
type WatchCancel struct {
	WatchID uint64
}

// KeepAlive keeps every listed session of the client alive: one message
// per interval lists all of them, and between those one may list only
// sessions new since. Seq rises with each one sent.
type KeepAlive struct {
	Seq        uint64
	SessionIDs []int64
}

// Gone is a session a keep-alive could not keep, and why (CodeSessionExpired,
// CodeForbidden for a session the client does not own, ...).
type Gone struct {
	ID   int64
	Code Code
}

// KeepAliveAck answers the KeepAlive of the same Seq once the leader has
// heard of it: Confirmed sessions are alive, Gone ones are not.
type KeepAliveAck struct {
	Seq       uint64
	Confirmed []int64
	Gone      []Gone
}

// ErrorMsg is the response of a failed request (see Error for the error
// a call returns).
type ErrorMsg struct {
	Code    Code
	Message string
}

// TimeToLive asks how long the cell would still wait before expiring
// one of the client's sessions (Session.TimeToLive). Version 2.
type TimeToLive struct {
	SessionID int64
}

// TimeToLiveResult is the time left on the leader's deadline for the
// session, as the leader saw it when it answered, and the TTL the session
// was granted at its creation (etcd's GrantedTTL), which a client resuming
// the session by ID needs. Neither is negative.
//
// TTL is a trailing field, written only when positive: a payload of Left
// alone (the first layout of version 2) still decodes, with TTL 0, which
// means the member did not say.
type TimeToLiveResult struct {
	Left time.Duration
	TTL  time.Duration
}

// Cancel tells the member the client gave up on the request named by the
// frame's ID; the member cancels its context and sends nothing back.
type Cancel struct{}

// Kind returns KindHello.
func (*Hello) Kind() Kind { return KindHello }

// Kind returns KindWelcome.
func (*Welcome) Kind() Kind { return KindWelcome }

// Kind returns KindRefuse.
func (*Refuse) Kind() Kind { return KindRefuse }

// Kind returns KindPing.
func (*Ping) Kind() Kind { return KindPing }

// Kind returns KindPong.
func (*Pong) Kind() Kind { return KindPong }

// Kind returns KindOK.
func (*OK) Kind() Kind { return KindOK }

// Kind returns KindPropose.
func (*Propose) Kind() Kind { return KindPropose }

// Kind returns KindProposeResult, or KindNestedResult for a result with
// nested transactions' results.
func (m *ProposeResult) Kind() Kind {
	if m.Nested {
		return KindNestedResult
	}
	return KindProposeResult
}

// Kind returns KindRead, or KindReadPage for a paged read.
func (m *Read) Kind() Kind {
	if m.Ranged {
		return KindReadRange
	}
	if m.paged() {
		return KindReadPage
	}
	return KindRead
}

// Kind returns KindReadResult, or KindRangeResult for a ranged read's.
func (m *ReadResult) Kind() Kind {
	if m.Ranged {
		return KindRangeResult
	}
	return KindReadResult
}

// Kind returns KindWatchStart.
func (*WatchStart) Kind() Kind { return KindWatchStart }

// Kind returns KindWatchEvents.
func (*WatchEvents) Kind() Kind { return KindWatchEvents }

// Kind returns KindWatchProgress.
func (*WatchProgress) Kind() Kind { return KindWatchProgress }

// Kind returns KindWatchEnd.
func (*WatchEnd) Kind() Kind { return KindWatchEnd }

// Kind returns KindWatchCancel.
func (*WatchCancel) Kind() Kind { return KindWatchCancel }

// Kind returns KindKeepAlive.
func (*KeepAlive) Kind() Kind { return KindKeepAlive }

// Kind returns KindKeepAliveAck.
func (*KeepAliveAck) Kind() Kind { return KindKeepAliveAck }

// Kind returns KindError.
func (*ErrorMsg) Kind() Kind { return KindError }

// Kind returns KindCancel.
func (*Cancel) Kind() Kind { return KindCancel }

// Kind returns KindTimeToLive.
func (*TimeToLive) Kind() Kind { return KindTimeToLive }

// Kind returns KindTimeToLiveResult.
func (*TimeToLiveResult) Kind() Kind { return KindTimeToLiveResult }

// newMessage returns a zero message of kind k, or nil for an unknown kind.
func newMessage(k Kind) Message {
	switch k {
	case KindHello:
		return new(Hello)
	case KindWelcome:
		return new(Welcome)
	case KindRefuse:
		return new(Refuse)
	case KindPing:
		return new(Ping)
	case KindPong:
		return new(Pong)
	case KindOK:
		return new(OK)
	case KindPropose:
		return new(Propose)
	case KindProposeResult:
		return new(ProposeResult)
	case KindRead:
		return new(Read)
	case KindReadResult:
		return new(ReadResult)
	case KindWatchStart:
		return new(WatchStart)
	case KindWatchEvents:
		return new(WatchEvents)
	case KindWatchProgress:
		return new(WatchProgress)
	case KindWatchEnd:
		return new(WatchEnd)
	case KindWatchCancel:
		return new(WatchCancel)
	case KindKeepAlive:
		return new(KeepAlive)
	case KindKeepAliveAck:
		return new(KeepAliveAck)
	case KindError:
		return new(ErrorMsg)
	case KindCancel:
		return new(Cancel)
	case KindTimeToLive:
		return new(TimeToLive)
	case KindTimeToLiveResult:
		return new(TimeToLiveResult)
	case KindMembers:
		return new(Members)
	case KindMembersResult:
		return new(MembersResult)
	case KindReadPage:
		return &Read{page: true}
	case KindReadRange:
		return &Read{Ranged: true}
	case KindRangeResult:
		return &ReadResult{Ranged: true}
	case KindNestedResult:
		return &ProposeResult{Nested: true}
	case KindWatchesCurrent:
		return new(WatchesCurrent)
	}
	return nil
}

// DecodeMessage decodes the payload of a frame of kind k. It never
// panics, allocates in proportion to len(payload), and shares no memory
// with it. Errors wrap ErrProtocol.
func DecodeMessage(k Kind, payload []byte) (Message, error) {
	m := newMessage(k)
	if m == nil {
		return nil, fmt.Errorf("%w: unknown kind %d", ErrProtocol, k)
	}
	d := newDec(payload)
	m.decode(&d)
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("kind %d: %w", k, err)
	}
	return m, nil
}

// AppendMessage appends m's payload encoding to b.
func AppendMessage(b []byte, m Message) []byte { return m.appendTo(b) }

func (m *Hello) appendTo(b []byte) []byte {
	b = append(b, m.MinVersion, m.MaxVersion)
	b = appendString(b, m.Name)
	return appendUvarint(b, uint64(m.MaxFrame))
}

func (m *Hello) decode(d *dec) {
	m.MinVersion, m.MaxVersion = d.U8(), d.U8()
	m.Name = d.Str()
	m.MaxFrame = d.u32()
}

func (m *Welcome) appendTo(b []byte) []byte {
	b = append(b, m.Version)
	b = appendString(b, m.Member)
	b = appendUvarint(b, m.CellID)
	b = appendVarint(b, int64(m.ElectionTimeout))
	b = appendVarint(b, int64(m.MinSessionTTL))
	b = appendUvarint(b, uint64(m.MaxFrame))
	b = appendUvarint(b, uint64(m.MaxInFlight))
	return appendUvarint(b, uint64(m.MaxWatchers))
}

func (m *Welcome) decode(d *dec) {
	m.Version = d.U8()
	m.Member = d.Str()
	m.CellID = d.Uvarint()
	m.ElectionTimeout = time.Duration(d.Varint())
	m.MinSessionTTL = time.Duration(d.Varint())
	m.MaxFrame, m.MaxInFlight, m.MaxWatchers = d.u32(), d.u32(), d.u32()
}

func (m *Refuse) appendTo(b []byte) []byte {
	return appendString(append(b, byte(m.Reason)), m.Message)
}

func (m *Refuse) decode(d *dec) {
	m.Reason = RefuseReason(d.U8())
	m.Message = d.Str()
}

func (*Ping) appendTo(b []byte) []byte   { return b }
func (*Ping) decode(*dec)                {}
func (*Pong) appendTo(b []byte) []byte   { return b }
func (*Pong) decode(*dec)                {}
func (*OK) appendTo(b []byte) []byte     { return b }
func (*OK) decode(*dec)                  {}
func (*Cancel) appendTo(b []byte) []byte { return b }
func (*Cancel) decode(*dec)              {}

func (m *Propose) appendTo(b []byte) []byte { return appendBytes(b, m.Command) }

func (m *Propose) decode(d *dec) { m.Command = d.Bytes() }

// minKV is the fewest bytes a KV takes: a key length, a value marker and
// four numbers.
const minKV = 6

func appendKV(b []byte, kv *command.KV) []byte {
	b = appendString(b, kv.Key)
	b = appendBytes(b, kv.Value)
	b = appendVarint(b, kv.Version)
	b = appendVarint(b, kv.CreateRev)
	b = appendVarint(b, kv.ModRev)
	return appendVarint(b, kv.Session)
}

func (d *dec) kv(kv *command.KV) {
	kv.Key = d.Str()
	kv.Value = d.Bytes()
	kv.Version, kv.CreateRev, kv.ModRev, kv.Session = d.Varint(), d.Varint(), d.Varint(), d.Varint()
}

func appendKVs(b []byte, kvs []command.KV) []byte {
	b = appendUvarint(b, uint64(len(kvs)))
	for i := range kvs {
		b = appendKV(b, &kvs[i])
	}
	return b
}

func (d *dec) kvs() []command.KV {
	n := d.Count(minKV)
	if n == 0 {
		return nil
	}
	kvs := make([]command.KV, n)
	for i := range kvs {
		d.kv(&kvs[i])
	}
	return kvs
}

func (m *ProposeResult) appendTo(b []byte) []byte {
	r := &m.Result
	b = append(b, byte(r.Status))
	b = appendVarint(b, r.Rev)
	b = appendBool(b, r.Succeeded)
	b = appendVarint(b, r.SessionID)
	if m.Nested {
		return appendNestedOps(b, r.Ops)
	}
	b = appendUvarint(b, uint64(len(r.Ops)))
	for i := range r.Ops {
		b = appendKVs(b, r.Ops[i].KVs)
		b = appendVarint(b, r.Ops[i].Deleted)
	}
	return b
}

func (m *ProposeResult) decode(d *dec) {
	r := &m.Result
	r.Status = command.Status(d.U8())
	r.Rev = d.Varint()
	r.Succeeded = d.Bool()
	r.SessionID = d.Varint()
	if m.Nested {
		r.Ops = d.nestedOps(0)
		return
	}
	// An op result is at least a KV count and a number.
	if n := d.Count(2); n > 0 {
		r.Ops = make([]command.OpResult, n)
		for i := range r.Ops {
			r.Ops[i].KVs = d.kvs()
			r.Ops[i].Deleted = d.Varint()
		}
	}
}

func (m *Read) appendTo(b []byte) []byte {
	if m.Ranged {
		return m.appendRange(b)
	}
	if m.paged() {
		return m.appendPage(b)
	}
	b = appendString(b, m.Key)
	return appendBool(appendBool(b, m.Prefix), m.Serializable)
}

func (m *Read) decode(d *dec) {
	if m.Ranged {
		m.decodeRange(d)
		return
	}
	if m.page {
		m.decodePage(d)
		return
	}
	m.Key = d.Str()
	m.Prefix, m.Serializable = d.Bool(), d.Bool()
}

func (m *ReadResult) appendTo(b []byte) []byte {
	if m.Ranged {
		return m.appendRange(b)
	}
	return appendVarint(appendKVs(b, m.KVs), m.Rev)
}

func (m *ReadResult) decode(d *dec) {
	if m.Ranged {
		m.decodeRange(d)
		return
	}
	m.KVs = d.kvs()
	m.Rev = d.Varint()
}

func (m *WatchStart) appendTo(b []byte) []byte {
	b = appendUvarint(b, m.WatchID)
	b = appendString(b, m.Prefix)
	b = appendVarint(b, m.FromRev)
	b = appendBool(b, m.PrevKV)
	b = appendBool(b, m.PutsOnly)
	b = appendBool(b, m.DeletesOnly)
	b = appendVarint(b, int64(m.ProgressInterval))
	return appendVarint(b, m.MaxLag)
}

func (m *WatchStart) decode(d *dec) {
	m.WatchID = d.Uvarint()
	m.Prefix = d.Str()
	m.FromRev = d.Varint()
	m.PrevKV, m.PutsOnly, m.DeletesOnly = d.Bool(), d.Bool(), d.Bool()
	m.ProgressInterval = time.Duration(d.Varint())
	m.MaxLag = d.Varint()
}

func (m *WatchEvents) appendTo(b []byte) []byte {
	b = appendUvarint(b, m.WatchID)
	b = appendUvarint(b, uint64(len(m.Events)))
	for i := range m.Events {
		e := &m.Events[i]
		b = append(b, byte(e.Type))
		b = appendKV(b, &e.KV)
		b = appendBool(b, e.PrevKV != nil)
		if e.PrevKV != nil {
			b = appendKV(b, e.PrevKV)
		}
		b = appendBool(b, e.EndOfRev)
	}
	return appendVarint(b, m.Rev)
}

func (m *WatchEvents) decode(d *dec) {
	m.WatchID = d.Uvarint()
	// An event is a type, a KV and two flags.
	if n := d.Count(minKV + 3); n > 0 {
		m.Events = make([]Event, n)
		for i := range m.Events {
			e := &m.Events[i]
			e.Type = EventType(d.U8())
			if e.Type != EventPut && e.Type != EventDelete {
				d.Fail("event type %d", e.Type)
			}
			d.kv(&e.KV)
			if d.Bool() {
				e.PrevKV = new(command.KV)
				d.kv(e.PrevKV)
			}
			e.EndOfRev = d.Bool()
		}
	}
	m.Rev = d.Varint()
}

func (m *WatchProgress) appendTo(b []byte) []byte {
	return appendVarint(appendUvarint(b, m.WatchID), m.Rev)
}

func (m *WatchProgress) decode(d *dec) {
	m.WatchID = d.Uvarint()
	m.Rev = d.Varint()
}

func (m *WatchEnd) appendTo(b []byte) []byte {
	b = appendUvarint(b, m.WatchID)
	b = appendUvarint(b, uint64(m.Code))
	b = appendString(b, m.Message)
	b = appendVarint(b, m.CompactRev)
	return appendVarint(b, m.Rev)
}

func (m *WatchEnd) decode(d *dec) {
	m.WatchID = d.Uvarint()
	m.Code = Code(d.UvarintMax(0xffff, "code"))
	m.Message = d.Str()
	m.CompactRev = d.Varint()
	m.Rev = d.Varint()
}

func (m *WatchCancel) appendTo(b []byte) []byte { return appendUvarint(b, m.WatchID) }

func (m *WatchCancel) decode(d *dec) { m.WatchID = d.Uvarint() }

func appendIDs(b []byte, ids []int64) []byte {
	b = appendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = appendVarint(b, id)
	}
	return b
}

// ids reads a list of session IDs: at most what the bytes left hold
// (one byte each) and MaxKeepAliveIDs, since 8 bytes are allocated for
// each.
func (d *dec) ids() []int64 {
	n := d.Count(1)
	if n > MaxKeepAliveIDs {
		d.Fail("%d session IDs, at most %d", n, MaxKeepAliveIDs)
		return nil
	}
	if n == 0 {
		return nil
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = d.Varint()
	}
	return ids
}

func (m *KeepAlive) appendTo(b []byte) []byte {
	return appendIDs(appendUvarint(b, m.Seq), m.SessionIDs)
}

func (m *KeepAlive) decode(d *dec) {
	m.Seq = d.Uvarint()
	m.SessionIDs = d.ids()
}

func (m *KeepAliveAck) appendTo(b []byte) []byte {
	b = appendIDs(appendUvarint(b, m.Seq), m.Confirmed)
	b = appendUvarint(b, uint64(len(m.Gone)))
	for _, g := range m.Gone {
		b = appendUvarint(appendVarint(b, g.ID), uint64(g.Code))
	}
	return b
}

func (m *KeepAliveAck) decode(d *dec) {
	m.Seq = d.Uvarint()
	m.Confirmed = d.ids()
	if n := d.Count(2); n > 0 {
		m.Gone = make([]Gone, n)
		for i := range m.Gone {
			m.Gone[i].ID = d.Varint()
			m.Gone[i].Code = Code(d.UvarintMax(0xffff, "code"))
		}
	}
}

func (m *ErrorMsg) appendTo(b []byte) []byte {
	return appendString(appendUvarint(b, uint64(m.Code)), m.Message)
}

func (m *ErrorMsg) decode(d *dec) {
	m.Code = Code(d.UvarintMax(0xffff, "code"))
	m.Message = d.Str()
}

func (m *TimeToLive) appendTo(b []byte) []byte { return appendVarint(b, m.SessionID) }

func (m *TimeToLive) decode(d *dec) { m.SessionID = d.Varint() }

func (m *TimeToLiveResult) appendTo(b []byte) []byte {
	b = appendVarint(b, int64(m.Left))
	if m.TTL > 0 {
		b = appendVarint(b, int64(m.TTL))
	}
	return b
}

func (m *TimeToLiveResult) decode(d *dec) {
	m.Left = time.Duration(d.Varint())
	if m.Left < 0 {
		d.Fail("negative time to live %d", m.Left)
	}
	if d.Len() == 0 {
		return // the first layout: no granted TTL
	}
	m.TTL = time.Duration(d.Varint())
	if m.TTL <= 0 {
		d.Fail("granted TTL %d is not positive", m.TTL)
	}
}
