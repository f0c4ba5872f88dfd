package command

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/coordcell/coord/internal/wirebytes"
)

// Formats 2 to 7, after the version byte:
//
//	Command  id: 8 bytes little-endian | kind: 1 byte | body: 1 byte (bodyTxn|bodySession|bodyProposer)
//	         [Txn if bodyTxn] [Session if bodySession] [Proposer if bodyProposer]
//	Txn      Body | [formats 6 and 7: str Actor | Admin: 1 byte (0 or 1) | uvarint ReadLimit]
//	Body     list If | list Then | list Else (the three counts first), then
//	         the If compares, the Then ops, the Else ops
//	Compare  str Key | Target: 1 byte | Op: 1 byte | varint Int | bytes Value
//	Op       Type: 1 byte | flags: 1 byte (opPrefix) | str Key | bytes Value | varint Session
//	         or, in format 7 with Type OpTxn: Type | flags: 0 | the nested Body
//	Session  varint ID | varint TTL | Expired: 1 byte (0 or 1; format 5:
//	         1 | 2 for LockDelay, which is set; format 6: either)
//	         | [format 3: uvarint Term] | [formats 4 to 6: uvarint Term | str Owner]
//	         | [format 6: Charged: 1 byte (0 or 1) | varint MaxSessions | varint Clock]
//	         | list IDs | list Credits
//	         then each ID as varint, then each Credit as varint ID, varint Nanos
//	Proposer str Owner | uvarint ID | uvarint Seq | uvarint Floor | uvarint Born | str Key
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
// refused. Format 5 is format 4 with LockDelay in the expired byte: it is
// written exactly when LockDelay is set, and a format 5 command without it
// is refused. Format 6 is format 5 (its session, if any, carries the
// flags byte, the term and the owner) with, in a session, Charged,
// MaxSessions and Clock, in a transaction its Actor, Admin and ReadLimit,
// and a Proposer body; it is the only format of KindSessionSilent and
// KindResolve. It is written exactly when the command has a proposer, the
// kind is KindSessionSilent, one of the three session fields is set
// (LockDelay may then be either), or the transaction has an Actor, Admin
// or a positive ReadLimit, and a format 6 command with none of that is
// refused. Format 7 is format 6 whose transaction nests another (an op of
// type OpTxn with a Txn, at most MaxNesting deep): it is written exactly
// when the transaction nests, and a format 7 command that does not is
// refused; in formats 2 to 6 an op of type OpTxn is an ordinary op (which
// the state machine refuses as it always did). So the one-encoding rule
// holds across all six.

const (
	bodyTxn      = 1 << 0
	bodySession  = 1 << 1
	bodyProposer = 1 << 2

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

// termed reports whether c has a session term.
func termed(c *Command) bool { return c.Session != nil && c.Session.Term != 0 }

// owned reports whether c needs format 4.
func owned(c *Command) bool { return c.Session != nil && c.Session.Owner != "" }

// lockDelayed reports whether c needs format 5.
func lockDelayed(c *Command) bool { return c.Session != nil && c.Session.LockDelay }

// bounded reports whether c needs format 6.
func bounded(c *Command) bool {
	if c.Kind == KindSessionSilent {
		return true
	}
	s := c.Session
	return s != nil && (s.Charged || s.MaxSessions != 0 || s.Clock != 0)
}

// actored reports whether c needs format 6.
func actored(c *Command) bool { return c.Txn != nil && (c.Txn.Actor != "" || c.Txn.Admin) }

// readLimited reports whether c needs format 6.
func readLimited(c *Command) bool { return c.Txn != nil && c.Txn.ReadLimit > 0 }

// nested reports whether c needs format 7.
func nested(c *Command) bool { return c.Txn != nil && c.Txn.Nests() }

// format is the format c is written in.
func format(c *Command) byte {
	switch {
	case nested(c):
		return Version
	case c.Proposer != nil, bounded(c), actored(c), readLimited(c):
		return versionBounded
	case lockDelayed(c):
		return versionLockDelay
	case owned(c):
		return versionOwned
	case termed(c):
		return versionTermed
	}
	return versionBinary2
}

func encodedLen(c *Command) int {
	n := 1 + 8 + 1 + 1
	f := format(c)
	if t := c.Txn; t != nil {
		n += bodyLen(t, f == Version)
		if f >= versionBounded {
			n += wirebytes.StringLen(t.Actor) + 1 + wirebytes.UvarintLen(uint64(t.ReadLimit))
		}
	}
	if p := c.Proposer; p != nil {
		n += wirebytes.StringLen(p.Owner) + wirebytes.UvarintLen(p.ID) + wirebytes.UvarintLen(p.Seq) +
			wirebytes.UvarintLen(p.Floor) + wirebytes.UvarintLen(p.Born) + wirebytes.StringLen(p.Key)
	}
	if s := c.Session; s != nil {
		n += wirebytes.VarintLen(s.ID) + wirebytes.VarintLen(s.TTL) + 1
		if f >= versionTermed {
			n += wirebytes.UvarintLen(s.Term)
		}
		if f >= versionOwned {
			n += wirebytes.StringLen(s.Owner)
		}
		if f >= versionBounded {
			n += 1 + wirebytes.VarintLen(s.MaxSessions) + wirebytes.VarintLen(s.Clock)
		}
		n += wirebytes.ListLen(len(s.IDs), s.IDs == nil) + wirebytes.ListLen(len(s.Credits), s.Credits == nil)
		for _, id := range s.IDs {
			n += wirebytes.VarintLen(id)
		}
		for _, cr := range s.Credits {
			n += wirebytes.VarintLen(cr.ID) + wirebytes.VarintLen(cr.Nanos)
		}
	}
	return n
}

// bodyLen is the length of t's Body; nest says the format carries
// nested transactions (7).
func bodyLen(t *Txn, nest bool) int {
	n := wirebytes.ListLen(len(t.If), t.If == nil) +
		wirebytes.ListLen(len(t.Then), t.Then == nil) +
		wirebytes.ListLen(len(t.Else), t.Else == nil)
	for i := range t.If {
		cmp := &t.If[i]
		n += wirebytes.StringLen(cmp.Key) + 2 + wirebytes.VarintLen(cmp.Int) + wirebytes.BytesLen(cmp.Value)
	}
	return n + opsLen(t.Then, nest) + opsLen(t.Else, nest)
}

func opsLen(ops []Op, nest bool) int {
	n := 0
	for i := range ops {
		op := &ops[i]
		if nest && op.nests() {
			n += 2 + bodyLen(op.Txn, true)
			continue
		}
		n += 2 + wirebytes.StringLen(op.Key) + wirebytes.BytesLen(op.Value) + wirebytes.VarintLen(op.Session)
	}
	return n
}

// encodeBinary sizes the buffer exactly first: one allocation per command.
func encodeBinary(c *Command) []byte {
	b := make([]byte, 0, encodedLen(c))
	f := format(c)
	b = append(b, f)
	b = binary.LittleEndian.AppendUint64(b, c.ID)
	var body byte
	if c.Txn != nil {
		body |= bodyTxn
	}
	if c.Session != nil {
		body |= bodySession
	}
	if c.Proposer != nil {
		body |= bodyProposer
	}
	b = append(b, byte(c.Kind), body)
	if t := c.Txn; t != nil {
		b = appendBody(b, t, f == Version)
		if f >= versionBounded {
			b = wirebytes.AppendString(b, t.Actor)
			var admin byte
			if t.Admin {
				admin = 1
			}
			b = append(b, admin)
			b = binary.AppendUvarint(b, uint64(t.ReadLimit))
		}
	}
	if s := c.Session; s != nil {
		b = binary.AppendVarint(b, s.ID)
		b = binary.AppendVarint(b, s.TTL)
		var exp byte
		if s.Expired {
			exp = 1
		}
		if s.LockDelay {
			exp |= 2
		}
		b = append(b, exp)
		if f >= versionTermed {
			b = binary.AppendUvarint(b, s.Term)
		}
		if f >= versionOwned {
			b = wirebytes.AppendString(b, s.Owner)
		}
		if f >= versionBounded {
			var charged byte
			if s.Charged {
				charged = 1
			}
			b = append(b, charged)
			b = binary.AppendVarint(b, s.MaxSessions)
			b = binary.AppendVarint(b, s.Clock)
		}
		b = wirebytes.AppendList(b, len(s.IDs), s.IDs == nil)
		b = wirebytes.AppendList(b, len(s.Credits), s.Credits == nil)
		for _, id := range s.IDs {
			b = binary.AppendVarint(b, id)
		}
		for _, cr := range s.Credits {
			b = binary.AppendVarint(b, cr.ID)
			b = binary.AppendVarint(b, cr.Nanos)
		}
	}
	if p := c.Proposer; p != nil {
		b = wirebytes.AppendString(b, p.Owner)
		b = binary.AppendUvarint(b, p.ID)
		b = binary.AppendUvarint(b, p.Seq)
		b = binary.AppendUvarint(b, p.Floor)
		b = binary.AppendUvarint(b, p.Born)
		b = wirebytes.AppendString(b, p.Key)
	}
	return b
}

// appendBody appends t's Body; nest says the format carries nested
// transactions (7).
func appendBody(b []byte, t *Txn, nest bool) []byte {
	b = wirebytes.AppendList(b, len(t.If), t.If == nil)
	b = wirebytes.AppendList(b, len(t.Then), t.Then == nil)
	b = wirebytes.AppendList(b, len(t.Else), t.Else == nil)
	for i := range t.If {
		cmp := &t.If[i]
		b = wirebytes.AppendString(b, cmp.Key)
		b = append(b, byte(cmp.Target), byte(cmp.Op))
		b = binary.AppendVarint(b, cmp.Int)
		b = wirebytes.AppendBytes(b, cmp.Value)
	}
	b = appendOps(b, t.Then, nest)
	return appendOps(b, t.Else, nest)
}

func appendOps(b []byte, ops []Op, nest bool) []byte {
	for i := range ops {
		op := &ops[i]
		if nest && op.nests() {
			b = appendBody(append(b, byte(OpTxn), 0), op.Txn, true)
			continue
		}
		var flags byte
		if op.Prefix {
			flags |= opPrefix
		}
		b = append(b, byte(op.Type), flags)
		b = wirebytes.AppendString(b, op.Key)
		b = wirebytes.AppendBytes(b, op.Value)
		b = binary.AppendVarint(b, op.Session)
	}
	return b
}

// decoder reads formats 2 to 7 with a minimal reader: each command has one
// encoding. The first error sticks, so callers check it once per stretch.
type decoder struct {
	wirebytes.Reader
	// keys holds the last distinct keys decoded (nkeys counts them all):
	// a transaction names the same key in several places (a lock's
	// compare, put and get), and those can share one string.
	keys  [4]string
	nkeys int
	// termed is set for formats 3 to 6: sessions carry a term.
	termed bool
	// owned is set for formats 4 to 6: sessions carry an owner.
	owned bool
	// flags is set for formats 5 and 6: the expired byte carries
	// LockDelay too.
	flags bool
	// bounds is set for format 6: sessions carry Charged, MaxSessions
	// and Clock.
	bounds bool
	// actor is set for formats 6 and 7: transactions carry Actor and
	// Admin.
	actor bool
	// nest is set for format 7: an op of type OpTxn is a nested
	// transaction; depth is how deep the body being read is.
	nest  bool
	depth int
}

// str reads a string, reusing a recent key's string when it repeats.
func (d *decoder) str() string {
	b := d.Slice()
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

// bodies allocates a command with the bodies the flags name, the
// proposer's included, in one allocation.
func bodies(body byte) *Command {
	type (
		withProposer struct {
			c Command
			p Proposer
		}
		txnProposer struct {
			c Command
			t Txn
			p Proposer
		}
		sessionProposer struct {
			c Command
			s Session
			p Proposer
		}
		bothProposer struct {
			c Command
			t Txn
			s Session
			p Proposer
		}
	)
	switch body {
	case 0:
		return new(Command)
	case bodyTxn:
		p := new(cmdTxn)
		p.c.Txn = &p.t
		return &p.c
	case bodySession:
		p := new(cmdSession)
		p.c.Session = &p.s
		return &p.c
	case bodyTxn | bodySession:
		p := new(cmdBoth)
		p.c.Txn, p.c.Session = &p.t, &p.s
		return &p.c
	case bodyProposer:
		p := new(withProposer)
		p.c.Proposer = &p.p
		return &p.c
	case bodyTxn | bodyProposer:
		p := new(txnProposer)
		p.c.Txn, p.c.Proposer = &p.t, &p.p
		return &p.c
	case bodySession | bodyProposer:
		p := new(sessionProposer)
		p.c.Session, p.c.Proposer = &p.s, &p.p
		return &p.c
	default: // all three
		p := new(bothProposer)
		p.c.Txn, p.c.Session, p.c.Proposer = &p.t, &p.s, &p.p
		return &p.c
	}
}

func decodeBinary(version byte, data []byte) (*Command, error) {
	if len(data) < 10 {
		return nil, fmt.Errorf("%w: truncated header", ErrMalformed)
	}
	id := binary.LittleEndian.Uint64(data)
	kind := Kind(data[8])
	body := data[9]
	d := decoder{
		Reader: wirebytes.NewMinimalReader(data[10:], ErrMalformed),
		termed: version >= versionTermed,
		owned:  version >= versionOwned,
		flags:  version >= versionLockDelay,
		bounds: version >= versionBounded,
		actor:  version >= versionBounded,
		nest:   version >= Version,
	}
	if kind < KindTxn || kind > maxKind {
		return nil, fmt.Errorf("%w: kind %d", ErrMalformed, kind)
	}
	if body&^(bodyTxn|bodySession|bodyProposer) != 0 {
		return nil, fmt.Errorf("%w: body flags %#x", ErrMalformed, body)
	}
	c := bodies(body)
	c.ID, c.Kind = id, kind
	if c.Txn != nil {
		d.txn(c.Txn)
	}
	if c.Session != nil {
		d.session(c.Session)
	}
	if c.Proposer != nil {
		d.proposer(c.Proposer)
	}
	if d.Err() == nil && kind == KindResolve && (c.Proposer == nil || c.Txn != nil || c.Session != nil) {
		d.Fail("a resolve carries a proposer and nothing else")
	}
	if d.Done() == nil && version != format(c) {
		d.Fail("format %d for a command of format %d", version, format(c))
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

func (d *decoder) proposer(p *Proposer) {
	p.Owner = d.str()
	p.ID = d.Uvarint()
	p.Seq = d.Uvarint()
	p.Floor = d.Uvarint()
	p.Born = d.Uvarint()
	p.Key = d.str()
}

func (d *decoder) txn(t *Txn) {
	d.body(t)
	if d.actor {
		t.Actor = d.str()
		t.Admin = d.Bool()
		t.ReadLimit = int64(d.UvarintMax(math.MaxInt64, "read limit"))
	}
}

// body reads a Txn's Body: the top transaction's, or (format 7) a nested
// one's, at most MaxNesting below the top, so no input can make the
// decoder recurse further.
func (d *decoder) body(t *Txn) {
	nIf, nThen, nElse := d.List(minCompare), d.List(minOp), d.List(minOp)
	// Each count alone fits; together they must too.
	if d.Err() == nil && max(nIf, 0)*minCompare+(max(nThen, 0)+max(nElse, 0))*minOp > d.Len() {
		d.Fail("%d compares and %d ops beyond the %d bytes left", nIf, nThen+nElse, d.Len())
	}
	if d.Err() != nil {
		return
	}
	if nIf >= 0 {
		t.If = make([]Compare, nIf)
		for i := range t.If {
			cmp := &t.If[i]
			cmp.Key = d.str()
			cmp.Target = CompareTarget(d.U8())
			cmp.Op = CompareOp(d.U8())
			cmp.Int = d.Varint()
			cmp.Value = d.Bytes()
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
		op.Type = OpType(d.U8())
		if d.nest && op.Type == OpTxn {
			d.nested(op)
			continue
		}
		switch flags := d.U8(); flags {
		case 0:
		case opPrefix:
			op.Prefix = true
		default:
			d.Fail("op flags %#x", flags)
		}
		op.Key = d.str()
		op.Value = d.Bytes()
		op.Session = d.Varint()
	}
}

// nested reads the rest of a format 7 OpTxn: its flags (none) and body.
func (d *decoder) nested(op *Op) {
	if flags := d.U8(); flags != 0 {
		d.Fail("nested transaction flags %#x", flags)
	}
	if d.depth >= MaxNesting {
		d.Fail("transactions nested more than %d deep", MaxNesting)
	}
	if d.Err() != nil {
		return
	}
	op.Txn = new(Txn)
	d.depth++
	d.body(op.Txn)
	d.depth--
}

func (d *decoder) session(s *Session) {
	s.ID = d.Varint()
	s.TTL = d.Varint()
	if d.flags {
		switch f := d.U8(); {
		case f > 3:
			d.Fail("session flags %#x", f)
		default:
			s.Expired, s.LockDelay = f&1 != 0, f&2 != 0
		}
	} else {
		s.Expired = d.Bool()
	}
	if d.termed {
		s.Term = d.Uvarint()
	}
	if d.owned {
		s.Owner = d.str()
	}
	if d.bounds {
		s.Charged = d.Bool()
		s.MaxSessions = d.Varint()
		s.Clock = d.Varint()
	}
	nIDs, nCredits := d.List(minID), d.List(minCredit)
	if d.Err() == nil && max(nIDs, 0)*minID+max(nCredits, 0)*minCredit > d.Len() {
		d.Fail("%d IDs and %d credits beyond the %d bytes left", nIDs, nCredits, d.Len())
	}
	if d.Err() != nil {
		return
	}
	if nIDs >= 0 {
		s.IDs = make([]int64, nIDs)
		for i := range s.IDs {
			s.IDs[i] = d.Varint()
		}
	}
	if nCredits >= 0 {
		s.Credits = make([]Credit, nCredits)
		for i := range s.Credits {
			s.Credits[i] = Credit{ID: d.Varint(), Nanos: d.Varint()}
		}
	}
}
