package command

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Formats 2 to 4, after the version byte:
//
//	Command  id: 8 bytes little-endian | kind: 1 byte | body: 1 byte (bodyTxn|bodySession)
//	         [Txn if bodyTxn] [Session if bodySession]
//	Txn      list If | list Then | list Else (the three counts first), then
//	         the If compares, the Then ops, the Else ops
//	Compare  str Key | Target: 1 byte | Op: 1 byte | varint Int | bytes Value
//	Op       Type: 1 byte | flags: 1 byte (opPrefix) | str Key | bytes Value | varint Session
//	Session  varint ID | varint TTL | Expired: 1 byte (0 or 1)
//	         | [format 3: uvarint Term] | [format 4: uvarint Term | str Owner]
//	         | list IDs | list Credits
//	         then each ID as varint, then each Credit as varint ID, varint Nanos
//	str      uvarint length | bytes
//	bytes    uvarint length+1, 0 for nil | bytes
//	list     uvarint count+1, 0 for nil
//
// Varints are encoding/binary's (signed ones zig-zag). The ID is fixed
// width because proposers start their IDs at a random number, which as a
// varint would take ten bytes. Nil and empty are told apart and every
// varint must be minimal, so a command has exactly one encoding and
// decodes to a command reflect.DeepEqual to the one encoded.
//
// Format 3 differs from 2 only by the session's Term. A command is
// written in format 3 exactly when it has a session with a non-zero Term
// and no Owner, and a format 3 command without one is refused. Format 4
// adds the session's Owner (its Term may be zero): it is written exactly
// when the Owner is not empty, and a format 4 command with an empty one is
// refused. So the one-encoding rule holds across all three.

const (
	bodyTxn     = 1 << 0
	bodySession = 1 << 1

	opPrefix = 1 << 0
)

// The fewest bytes an element can take, so a count can be checked
// against the bytes left before anything is allocated for it.
const (
	minCompare = 5 // key length, target, op, int, value length
	minOp      = 5 // type, flags, key length, value length, session
	minID      = 1
	minCredit  = 2
)

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

func varintLen(x int64) int { return uvarintLen(uint64(x<<1) ^ uint64(x>>63)) }

func strLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

func bytesLen(b []byte) int { return uvarintLen(uint64(len(b))+1) + len(b) }

// listLen is the length of a list header; a nil list is count 0.
func listLen(n int, isNil bool) int {
	if isNil {
		return 1
	}
	return uvarintLen(uint64(n) + 1)
}

func appendList(b []byte, n int, isNil bool) []byte {
	if isNil {
		return append(b, 0)
	}
	return binary.AppendUvarint(b, uint64(n)+1)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

// termed reports whether c has a session term.
func termed(c *Command) bool { return c.Session != nil && c.Session.Term != 0 }

// owned reports whether c needs format 4.
func owned(c *Command) bool { return c.Session != nil && c.Session.Owner != "" }

// format is the format c is written in.
func format(c *Command) byte {
	switch {
	case owned(c):
		return Version
	case termed(c):
		return versionTermed
	}
	return versionBinary2
}

func encodedLen(c *Command) int {
	n := 1 + 8 + 1 + 1
	if t := c.Txn; t != nil {
		n += listLen(len(t.If), t.If == nil) + listLen(len(t.Then), t.Then == nil) + listLen(len(t.Else), t.Else == nil)
		for i := range t.If {
			cmp := &t.If[i]
			n += strLen(cmp.Key) + 2 + varintLen(cmp.Int) + bytesLen(cmp.Value)
		}
		n += opsLen(t.Then) + opsLen(t.Else)
	}
	if s := c.Session; s != nil {
		n += varintLen(s.ID) + varintLen(s.TTL) + 1
		if s.Term != 0 || s.Owner != "" {
			n += uvarintLen(s.Term)
		}
		if s.Owner != "" {
			n += strLen(s.Owner)
		}
		n += listLen(len(s.IDs), s.IDs == nil) + listLen(len(s.Credits), s.Credits == nil)
		for _, id := range s.IDs {
			n += varintLen(id)
		}
		for _, cr := range s.Credits {
			n += varintLen(cr.ID) + varintLen(cr.Nanos)
		}
	}
	return n
}

func opsLen(ops []Op) int {
	n := 0
	for i := range ops {
		op := &ops[i]
		n += 2 + strLen(op.Key) + bytesLen(op.Value) + varintLen(op.Session)
	}
	return n
}

// encodeBinary sizes the buffer exactly first: one allocation per command.
func encodeBinary(c *Command) []byte {
	b := make([]byte, 0, encodedLen(c))
	b = append(b, format(c))
	b = binary.LittleEndian.AppendUint64(b, c.ID)
	var body byte
	if c.Txn != nil {
		body |= bodyTxn
	}
	if c.Session != nil {
		body |= bodySession
	}
	b = append(b, byte(c.Kind), body)
	if t := c.Txn; t != nil {
		b = appendList(b, len(t.If), t.If == nil)
		b = appendList(b, len(t.Then), t.Then == nil)
		b = appendList(b, len(t.Else), t.Else == nil)
		for i := range t.If {
			cmp := &t.If[i]
			b = appendStr(b, cmp.Key)
			b = append(b, byte(cmp.Target), byte(cmp.Op))
			b = binary.AppendVarint(b, cmp.Int)
			b = appendBytes(b, cmp.Value)
		}
		b = appendOps(b, t.Then)
		b = appendOps(b, t.Else)
	}
	if s := c.Session; s != nil {
		b = binary.AppendVarint(b, s.ID)
		b = binary.AppendVarint(b, s.TTL)
		var exp byte
		if s.Expired {
			exp = 1
		}
		b = append(b, exp)
		if s.Term != 0 || s.Owner != "" {
			b = binary.AppendUvarint(b, s.Term)
		}
		if s.Owner != "" {
			b = appendStr(b, s.Owner)
		}
		b = appendList(b, len(s.IDs), s.IDs == nil)
		b = appendList(b, len(s.Credits), s.Credits == nil)
		for _, id := range s.IDs {
			b = binary.AppendVarint(b, id)
		}
		for _, cr := range s.Credits {
			b = binary.AppendVarint(b, cr.ID)
			b = binary.AppendVarint(b, cr.Nanos)
		}
	}
	return b
}

func appendOps(b []byte, ops []Op) []byte {
	for i := range ops {
		op := &ops[i]
		var flags byte
		if op.Prefix {
			flags |= opPrefix
		}
		b = append(b, byte(op.Type), flags)
		b = appendStr(b, op.Key)
		b = appendBytes(b, op.Value)
		b = binary.AppendVarint(b, op.Session)
	}
	return b
}

// decoder reads formats 2 to 4. The first error sticks: later reads return zero
// values, so callers check err once per stretch rather than per field.
type decoder struct {
	b   []byte
	err error
	// keys holds the last distinct keys decoded (nkeys counts them all):
	// a transaction names the same key in several places (a lock's
	// compare, put and get), and those can share one string.
	keys  [4]string
	nkeys int
	// termed is set for formats 3 and 4: sessions carry a term.
	termed bool
	// owned is set for format 4: sessions carry an owner.
	owned bool
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) u8() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	// A last byte of zero means a longer form than needed: refused, so
	// that each command has one encoding.
	if n > 1 && d.b[n-1] == 0 {
		d.fail("non-minimal varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// length reads a length that must fit in the bytes left.
func (d *decoder) length() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("length %d beyond the %d bytes left", n, len(d.b))
		return 0
	}
	return int(n)
}

// list reads a list header: the count, or -1 for nil. The count must
// leave at least size bytes per element, which bounds what the caller
// allocates by the input's size.
func (d *decoder) list(size int) int {
	n := d.uvarint()
	if n == 0 {
		return -1
	}
	n--
	if n > uint64(len(d.b)/size) {
		d.fail("count %d beyond the %d bytes left", n, len(d.b))
		return -1
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.length()
	b := d.b[:n]
	d.b = d.b[n:]
	for i := range d.keys {
		if d.keys[i] == string(b) {
			return d.keys[i]
		}
	}
	s := string(b)
	d.keys[d.nkeys%len(d.keys)] = s
	d.nkeys++
	return s
}

// bytes copies: data belongs to the caller (for the state machine, to
// Raft's log), and a decoded command must not change if it is reused.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n == 0 {
		return nil
	}
	n--
	if n > uint64(len(d.b)) {
		d.fail("length %d beyond the %d bytes left", n, len(d.b))
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b)
	d.b = d.b[n:]
	return v
}

// Allocation units: the command and its body live and die together, so
// they come in one allocation.
type (
	cmdTxn struct {
		c Command
		t Txn
	}
	cmdSession struct {
		c Command
		s Session
	}
	cmdBoth struct {
		c Command
		t Txn
		s Session
	}
)

func decodeBinary(version byte, data []byte) (*Command, error) {
	d := decoder{b: data, termed: version >= versionTermed, owned: version == Version}
	if len(d.b) < 10 {
		return nil, fmt.Errorf("%w: truncated header", ErrMalformed)
	}
	id := binary.LittleEndian.Uint64(d.b)
	kind := Kind(d.b[8])
	body := d.b[9]
	d.b = d.b[10:]
	if kind < KindTxn || kind > maxKind {
		return nil, fmt.Errorf("%w: kind %d", ErrMalformed, kind)
	}
	var c *Command
	switch body {
	case 0:
		c = new(Command)
	case bodyTxn:
		p := new(cmdTxn)
		c = &p.c
		c.Txn = &p.t
	case bodySession:
		p := new(cmdSession)
		c = &p.c
		c.Session = &p.s
	case bodyTxn | bodySession:
		p := new(cmdBoth)
		c = &p.c
		c.Txn, c.Session = &p.t, &p.s
	default:
		return nil, fmt.Errorf("%w: body flags %#x", ErrMalformed, body)
	}
	c.ID, c.Kind = id, kind
	if c.Txn != nil {
		d.txn(c.Txn)
	}
	if c.Session != nil {
		d.session(c.Session)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err == nil && version != format(c) {
		d.fail("format %d for a command of format %d", version, format(c))
	}
	if d.err != nil {
		return nil, d.err
	}
	return c, nil
}

func (d *decoder) txn(t *Txn) {
	nIf, nThen, nElse := d.list(minCompare), d.list(minOp), d.list(minOp)
	// Each count alone fits; together they must too.
	if d.err == nil && max(nIf, 0)*minCompare+(max(nThen, 0)+max(nElse, 0))*minOp > len(d.b) {
		d.fail("%d compares and %d ops beyond the %d bytes left", nIf, nThen+nElse, len(d.b))
	}
	if d.err != nil {
		return
	}
	if nIf >= 0 {
		t.If = make([]Compare, nIf)
		for i := range t.If {
			cmp := &t.If[i]
			cmp.Key = d.str()
			cmp.Target = CompareTarget(d.u8())
			cmp.Op = CompareOp(d.u8())
			cmp.Int = d.varint()
			cmp.Value = d.bytes()
		}
	}
	// Then and Else share one array; each gets its own capacity so an
	// append to Then cannot write over Else.
	ops := make([]Op, max(nThen, 0)+max(nElse, 0))
	if nThen >= 0 {
		t.Then = ops[:nThen:nThen]
		d.ops(t.Then)
		ops = ops[nThen:]
	}
	if nElse >= 0 {
		t.Else = ops[:nElse:nElse]
		d.ops(t.Else)
	}
}

func (d *decoder) ops(ops []Op) {
	for i := range ops {
		op := &ops[i]
		op.Type = OpType(d.u8())
		switch flags := d.u8(); flags {
		case 0:
		case opPrefix:
			op.Prefix = true
		default:
			d.fail("op flags %#x", flags)
		}
		op.Key = d.str()
		op.Value = d.bytes()
		op.Session = d.varint()
	}
}

func (d *decoder) session(s *Session) {
	s.ID = d.varint()
	s.TTL = d.varint()
	switch exp := d.u8(); exp {
	case 0:
	case 1:
		s.Expired = true
	default:
		d.fail("expired byte %#x", exp)
	}
	if d.termed {
		s.Term = d.uvarint()
	}
	if d.owned {
		s.Owner = d.str()
	}
	nIDs, nCredits := d.list(minID), d.list(minCredit)
	if d.err == nil && max(nIDs, 0)*minID+max(nCredits, 0)*minCredit > len(d.b) {
		d.fail("%d IDs and %d credits beyond the %d bytes left", nIDs, nCredits, len(d.b))
	}
	if d.err != nil {
		return
	}
	if nIDs >= 0 {
		s.IDs = make([]int64, nIDs)
		for i := range s.IDs {
			s.IDs[i] = d.varint()
		}
	}
	if nCredits >= 0 {
		s.Credits = make([]Credit, nCredits)
		for i := range s.Credits {
			s.Credits[i] = Credit{ID: d.varint(), Nanos: d.varint()}
		}
	}
}
