package command

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// encodeV1 is Encode as it was before format 2, to produce what older
// builds left in the log.
func encodeV1(t testing.TB, c *Command) []byte {
	b, err := msgpack.Marshal(c)
	require.NoError(t, err)
	return append([]byte{versionMsgpack}, b...)
}

// normalizeV1 makes c what format 1 gives back: omitempty writes neither
// empty lists nor empty values, so they come back nil.
func normalizeV1(c *Command) *Command {
	c = clone(c)
	c.Proposer = nil // format 1 has none
	if t := c.Txn; t != nil {
		t.Actor, t.Admin = "", false // format 1 predates actors
		if len(t.If) == 0 {
			t.If = nil
		}
		if len(t.Then) == 0 {
			t.Then = nil
		}
		if len(t.Else) == 0 {
			t.Else = nil
		}
		for i := range t.If {
			if len(t.If[i].Value) == 0 {
				t.If[i].Value = nil
			}
		}
		for _, ops := range [][]Op{t.Then, t.Else} {
			for i := range ops {
				if len(ops[i].Value) == 0 {
					ops[i].Value = nil
				}
				ops[i].Txn = nil // format 1 predates nesting
			}
		}
	}
	if t := c.Txn; t != nil {
		t.ReadLimit = 0 // format 1 predates read limits
	}
	if s := c.Session; s != nil {
		s.Owner = "" // format 1 predates owners and never carries one
		s.LockDelay = false
		s.Charged, s.MaxSessions, s.Clock = false, 0, 0 // nor format 6's fields
		if len(s.IDs) == 0 {
			s.IDs = nil
		}
		if len(s.Credits) == 0 {
			s.Credits = nil
		}
	}
	return c
}

// clone deep-copies c, keeping nil and empty apart.
func clone(c *Command) *Command {
	cp := *c
	cloneBytes := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		return append([]byte{}, b...)
	}
	cloneOps := func(ops []Op) []Op {
		if ops == nil {
			return nil
		}
		out := append([]Op{}, ops...)
		for i := range out {
			out[i].Value = cloneBytes(out[i].Value)
		}
		return out
	}
	if t := c.Txn; t != nil {
		nt := Txn{Then: cloneOps(t.Then), Else: cloneOps(t.Else), Actor: t.Actor, Admin: t.Admin, ReadLimit: t.ReadLimit}
		if t.If != nil {
			nt.If = append([]Compare{}, t.If...)
			for i := range nt.If {
				nt.If[i].Value = cloneBytes(nt.If[i].Value)
			}
		}
		cp.Txn = &nt
	}
	if s := c.Session; s != nil {
		ns := *s
		if s.IDs != nil {
			ns.IDs = append([]int64{}, s.IDs...)
		}
		if s.Credits != nil {
			ns.Credits = append([]Credit{}, s.Credits...)
		}
		cp.Session = &ns
	}
	return &cp
}

func putCommand() *Command {
	return &Command{ID: 0x9e3779b97f4a7c15, Kind: KindTxn, Txn: &Txn{Then: []Op{
		{Type: OpPut, Key: "key/000001", Value: bytes.Repeat([]byte("v"), 100)},
	}}}
}

// lockCommand is what acquiring a lock proposes: take the queue key if
// it is absent, and read the queue either way.
func lockCommand() *Command {
	const key, prefix = "locks/job/000000000000002a", "locks/job/"
	return &Command{ID: 0x9e3779b97f4a7c16, Kind: KindTxn, Txn: &Txn{
		If:   []Compare{{Key: key, Target: TargetCreateRev, Op: Equal, Int: 0}},
		Then: []Op{{Type: OpPut, Key: key, Session: 42}, {Type: OpGet, Key: prefix, Prefix: true}},
		Else: []Op{{Type: OpGet, Key: key}, {Type: OpGet, Key: prefix, Prefix: true}},
	}}
}

// binaryCases covers every kind and field, nil against empty, and varints
// of every width.
func binaryCases() map[string]*Command {
	return map[string]*Command{
		"noop":              {ID: 1, Kind: KindNoop},
		"zero id":           {Kind: KindNoop},
		"max id":            {ID: math.MaxUint64, Kind: KindNoop},
		"put":               putCommand(),
		"lock":              lockCommand(),
		"empty txn":         {Kind: KindTxn, Txn: &Txn{}},
		"empty lists":       {Kind: KindTxn, Txn: &Txn{If: []Compare{}, Then: []Op{}, Else: []Op{}}},
		"only else":         {Kind: KindTxn, Txn: &Txn{Else: []Op{{Type: OpDelete, Key: "a", Prefix: true}}}},
		"empty then":        {Kind: KindTxn, Txn: &Txn{Then: []Op{}, Else: []Op{{Type: OpGet, Key: "a"}}}},
		"nil and empty val": {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpPut, Key: "a"}, {Type: OpPut, Key: "b", Value: []byte{}}}}},
		"empty key":         {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpGet, Prefix: true}}}},
		"long key and value": {Kind: KindTxn, Txn: &Txn{Then: []Op{{
			Type: OpPut, Key: strings.Repeat("k", 300), Value: bytes.Repeat([]byte{0xff}, 70000), Session: math.MaxInt64,
		}}}},
		"compares": {ID: 7, Kind: KindTxn, Txn: &Txn{If: []Compare{
			{Key: "a", Target: TargetVersion, Op: Equal, Int: 0},
			{Key: "b", Target: TargetValue, Op: NotEqual, Value: []byte{0, 1, 0xff}},
			{Key: "c", Target: TargetCreateRev, Op: Less, Int: -1},
			{Key: "d", Target: TargetModRev, Op: Greater, Int: math.MinInt64},
			{Key: "e", Target: TargetSession, Op: Equal, Int: math.MaxInt64},
			{Key: "f", Target: TargetValue, Op: Equal, Value: []byte{}},
			{Key: "\x00\xff non-UTF-8", Target: 200, Op: 255},
		}}},
		"session create":   {Kind: KindSessionCreate, Session: &Session{TTL: 10e9}},
		"session end":      {ID: 1 << 63, Kind: KindSessionEnd, Session: &Session{ID: 42}},
		"session expired":  {Kind: KindSessionEnd, Session: &Session{ID: 42, Expired: true}},
		"session seen":     {Kind: KindSessionSeen, Session: &Session{IDs: []int64{1, 127, 128, math.MaxInt64, -1, math.MinInt64}}},
		"session credit":   {Kind: KindSessionCredit, Session: &Session{Credits: []Credit{{ID: 3, Nanos: 5e8}, {ID: math.MaxInt64, Nanos: -1}}}},
		"session empty":    {Kind: KindSessionSeen, Session: &Session{IDs: []int64{}, Credits: []Credit{}}},
		"zero session":     {Kind: KindSessionCreate, Session: &Session{}},
		"txn and session":  {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpGet, Key: "a"}}}, Session: &Session{ID: 1}},
		"session, no body": {Kind: KindSessionEnd},
		// Format 3: a leader's decisions carry its term.
		"expired by term 1":   {Kind: KindSessionEnd, Session: &Session{ID: 42, Expired: true, Term: 1}},
		"client's create":     {Kind: KindSessionCreate, Session: &Session{TTL: 5e9, Owner: "client:worker-1"}},
		"owner and term":      {Kind: KindSessionCreate, Session: &Session{TTL: 5e9, Term: 3, Owner: "client:ü"}},
		"lock-delay expiry":   {Kind: KindSessionEnd, Session: &Session{ID: 9, Expired: true, LockDelay: true, Term: 4}},
		"lock-delay, no term": {Kind: KindSessionEnd, Session: &Session{ID: 9, Expired: true, LockDelay: true}},
		"credit by max term":  {Kind: KindSessionCredit, Session: &Session{Term: math.MaxUint64, Credits: []Credit{{ID: 3, Nanos: 5e8}}}},
		"seen by term 300":    {Kind: KindSessionSeen, Session: &Session{Term: 300, IDs: []int64{1, 2}}},
		"txn, termed session": {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpGet, Key: "a"}}},
			Session: &Session{ID: 1, Term: 128}},
		"put, proposer": {ID: 7, Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpPut, Key: "a", Value: []byte("v")}}},
			Proposer: &Proposer{ID: math.MaxUint64, Seq: 9, Floor: 3, Born: 1 << 40}},
		"client session, proposer": {Kind: KindSessionCreate, Session: &Session{TTL: 5e9, Owner: "client:bob"},
			Proposer: &Proposer{Owner: "client:bob", ID: 1, Seq: 1}},
		"expiry with delay, proposer": {Kind: KindSessionEnd, Session: &Session{ID: 9, Expired: true, LockDelay: true, Term: 4},
			Proposer: &Proposer{ID: 1, Seq: 2, Floor: 1}},
		"idempotency key": {Kind: KindTxn, Txn: &Txn{}, Proposer: &Proposer{Owner: "client:x", Key: "job-17"}},
		"resolve":         {Kind: KindResolve, Proposer: &Proposer{ID: 5, Seq: 4}},
		// Format 6: creations that count against the quota and their
		// owner's bound, and a leader's silence marks and clock.
		"charged create":       {Kind: KindSessionCreate, Session: &Session{TTL: 10e9, Charged: true}},
		"client's bounded":     {Kind: KindSessionCreate, Session: &Session{TTL: 5e9, Owner: "client:w", Charged: true, MaxSessions: 4096}},
		"bound, not charged":   {Kind: KindSessionCreate, Session: &Session{TTL: 5e9, Owner: "client:w", MaxSessions: math.MaxInt64}},
		"silent marks":         {Kind: KindSessionSilent, Session: &Session{Term: 3, Clock: 9e9, Credits: []Credit{{ID: 5, Nanos: 0}, {ID: 6, Nanos: 8e9}}}},
		"clock only":           {Kind: KindSessionSilent, Session: &Session{Term: 3, Clock: 1}},
		"silent, no session":   {Kind: KindSessionSilent},
		"silent, zero session": {Kind: KindSessionSilent, Session: &Session{}},
		"lock-delay, clocked":  {Kind: KindSessionEnd, Session: &Session{ID: 9, Expired: true, LockDelay: true, Term: 4, Clock: -1}},
		// Format 6: a client's transaction carries its actor.
		"client's txn": {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpDelete, Key: "locks/a/m0"}}, Actor: "client:w1"}},
		"admin's txn": {Kind: KindTxn, Txn: &Txn{Else: []Op{{Type: OpDelete, Key: "locks/", Prefix: true}},
			Actor: "client:ops", Admin: true}},
		"actor and session": {Kind: KindTxn, Txn: &Txn{Actor: "client:ü"}, Session: &Session{ID: 1, Term: 2, Owner: "o"}},
		// Format 6: a transaction's reads bounded.
		"read-limited lock": func() *Command {
			c := lockCommand()
			c.Txn.ReadLimit = 4 << 20
			return c
		}(),
		"read limit 1":       {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpGet, Key: "a", Prefix: true}}, ReadLimit: 1}},
		"max read limit":     {Kind: KindTxn, Txn: &Txn{ReadLimit: math.MaxInt64}},
		"read limit, no ops": {Kind: KindTxn, Txn: &Txn{If: []Compare{}, ReadLimit: 300}},
		"read limit, session": {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpGet, Key: "a"}}, ReadLimit: 128},
			Session: &Session{ID: 1, Term: 2, Owner: "client:x"}},
		"read limit, lock-delay session": {Kind: KindTxn, Txn: &Txn{ReadLimit: 9},
			Session: &Session{ID: 1, Expired: true, LockDelay: true}},
		// Format 7: nested transactions.
		"nested": {ID: 3, Kind: KindTxn, Txn: &Txn{
			If: []Compare{{Key: "a", Target: TargetVersion, Op: Equal}},
			Then: []Op{{Type: OpPut, Key: "a", Value: []byte("1")}, {Type: OpTxn, Txn: &Txn{
				If:   []Compare{{Key: "b", Target: TargetValue, Op: Equal, Value: []byte("x")}},
				Then: []Op{{Type: OpDelete, Key: "b"}},
				Else: []Op{{Type: OpGet, Key: "b", Prefix: true}, {Type: OpTxn, Txn: &Txn{}}},
			}}},
			Else: []Op{{Type: OpTxn, Txn: &Txn{If: []Compare{}, Then: []Op{}, Else: []Op{}}}},
		}},
		"nested, actor and proposer": {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpTxn, Txn: &Txn{
			Then: []Op{{Type: OpPut, Key: "k", Session: 5}}}}}, Actor: "client:w", ReadLimit: 64},
			Proposer: &Proposer{ID: 1, Seq: 2}},
		"nested, session": {Kind: KindTxn, Txn: &Txn{Else: []Op{{Type: OpTxn, Txn: &Txn{}}}},
			Session: &Session{ID: 1, Term: 2, Owner: "o", Charged: true}},
		"nested max deep": {Kind: KindTxn, Txn: deepTxn(MaxNesting)},
		// Before format 7 an OpTxn is an op like another (which the state
		// machine refuses): its Key and Value are read, nothing nests.
		"opTxn, format 2": {Kind: KindTxn, Txn: &Txn{Then: []Op{{Type: OpTxn, Key: "a", Value: []byte("v")}}}},
	}
}

// deepTxn is a transaction that nests n deep, one OpTxn a level.
func deepTxn(n int) *Txn {
	t := &Txn{Then: []Op{{Type: OpPut, Key: "leaf"}}}
	for range n {
		t = &Txn{Then: []Op{{Type: OpTxn, Txn: t}}}
	}
	return t
}

// wantVersion is the format Encode must write for c: 6 only when a
// proposer, a silence mark, a charge, an owner's bound, a clock or a
// transaction's actor or read limit needs it, 5 only when a lock-delay
// flag does, 4 only when a session owner does, 3 only when a session term
// does, so
// everything else stays format 2 byte for byte.
func wantVersion(c *Command) byte {
	s := c.Session
	switch {
	case c.Txn != nil && slices.ContainsFunc(append(slices.Clone(c.Txn.Then), c.Txn.Else...),
		func(op Op) bool { return op.Type == OpTxn && op.Txn != nil }):
		return 7
	case c.Proposer != nil, c.Kind == KindSessionSilent || s != nil && (s.Charged || s.MaxSessions != 0 || s.Clock != 0),
		c.Txn != nil && (c.Txn.Actor != "" || c.Txn.Admin || c.Txn.ReadLimit > 0):
		return 6
	case c.Session != nil && c.Session.LockDelay:
		return 5
	case c.Session != nil && c.Session.Owner != "":
		return 4
	case c.Session != nil && c.Session.Term != 0:
		return 3
	}
	return versionBinary2
}

func TestBinaryRoundTrip(t *testing.T) {
	for name, c := range binaryCases() {
		t.Run(name, func(t *testing.T) {
			want := clone(c)
			b, err := Encode(c)
			require.NoError(t, err)
			require.Equal(t, wantVersion(c), b[0])
			require.Equal(t, cap(b), len(b), "buffer not sized exactly")
			require.Equal(t, want, c, "Encode changed its argument")
			got, err := Decode(b)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

func TestEncodeAllocatesOnce(t *testing.T) {
	for name, c := range binaryCases() {
		allocs := testing.AllocsPerRun(10, func() {
			if _, err := Encode(c); err != nil {
				t.Fatal(err)
			}
		})
		require.EqualValues(t, 1, allocs, name)
	}
}

func TestEncodeNil(t *testing.T) {
	_, err := Encode(nil)
	require.Error(t, err)
}

// TestDecodeDoesNotAlias checks that a decoded command owns its bytes:
// the caller may reuse the buffer it decoded from.
func TestDecodeDoesNotAlias(t *testing.T) {
	c := binaryCases()["compares"]
	c.Txn.Then = []Op{{Type: OpPut, Key: "k", Value: []byte("value")}}
	b, err := Encode(c)
	require.NoError(t, err)
	got, err := Decode(b)
	require.NoError(t, err)
	for i := 1; i < len(b); i++ {
		b[i] = ^b[i]
	}
	require.Equal(t, c, got)
}

// seed returns the seed of a randomised test, from COMMAND_TEST_SEED to
// replay a failure, else from the clock.
func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("COMMAND_TEST_SEED"); v != "" {
		var err error
		s, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (replay with COMMAND_TEST_SEED=%d)", s, s)
	return s
}

func randomCommand(r *rand.Rand) *Command {
	varint := func() int64 {
		switch r.IntN(6) {
		case 0:
			return 0
		case 1:
			return math.MinInt64
		case 2:
			return math.MaxInt64
		case 3:
			return r.Int64N(300) - 150
		default:
			return int64(r.Uint64() >> r.IntN(64))
		}
	}
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	length := func() int {
		if r.IntN(10) == 0 {
			return r.IntN(400)
		}
		return r.IntN(20)
	}
	value := func() []byte {
		if r.IntN(4) == 0 {
			return nil
		}
		return data(length())
	}
	// count returns -1 for a nil list.
	count := func() int {
		if r.IntN(4) == 0 {
			return -1
		}
		return r.IntN(5)
	}
	c := &Command{ID: r.Uint64() >> r.IntN(64), Kind: Kind(1 + r.IntN(int(maxKind-1)))}
	if r.IntN(3) == 0 {
		u := func() uint64 { return r.Uint64() >> r.IntN(64) }
		c.Proposer = &Proposer{ID: u(), Seq: u(), Floor: u(), Born: u()}
		if r.IntN(2) == 0 {
			c.Proposer.Owner = string(data(length()))
		}
		if r.IntN(4) == 0 {
			c.Proposer.Key = string(data(length()))
		}
		if r.IntN(5) == 0 {
			c.Kind = KindResolve
			return c
		}
	}
	if r.IntN(2) == 0 {
		c.Txn = &Txn{}
		if n := count(); n >= 0 {
			c.Txn.If = make([]Compare, n)
			for i := range c.Txn.If {
				c.Txn.If[i] = Compare{Key: string(data(length())), Target: CompareTarget(r.Uint32()), Op: CompareOp(r.Uint32()), Int: varint(), Value: value()}
			}
		}
		var body func(t *Txn, depth int)
		body = func(t *Txn, depth int) {
			for _, ops := range []*[]Op{&t.Then, &t.Else} {
				if n := count(); n >= 0 {
					*ops = make([]Op, n)
					for i := range *ops {
						if depth < MaxNesting && r.IntN(8) == 0 {
							inner := &Txn{}
							if r.IntN(2) == 0 {
								inner.If = []Compare{{Key: string(data(length())), Target: TargetModRev, Op: Less, Int: varint()}}
							}
							body(inner, depth+1)
							(*ops)[i] = Op{Type: OpTxn, Txn: inner}
							continue
						}
						typ := OpType(r.Uint32())
						if typ == OpTxn {
							typ++ // an OpTxn is a nested one; without its Txn it has no encoding beside one
						}
						(*ops)[i] = Op{Type: typ, Key: string(data(length())), Value: value(), Prefix: r.IntN(2) == 0, Session: varint()}
					}
				}
			}
		}
		body(c.Txn, 0)
		if r.IntN(3) == 0 {
			c.Txn.Actor = string(data(length()))
		}
		c.Txn.Admin = r.IntN(4) == 0
	}
	if c.Txn != nil && r.IntN(3) == 0 {
		c.Txn.ReadLimit = 1 + int64(r.Uint64()>>(1+r.IntN(63)))
	}
	if r.IntN(2) == 0 {
		c.Session = &Session{ID: varint(), TTL: varint(), Expired: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			c.Session.Term = r.Uint64() >> r.IntN(64)
		}
		if r.IntN(3) == 0 {
			c.Session.Owner = string(data(length()))
		}
		c.Session.LockDelay = r.IntN(4) == 0
		if r.IntN(4) == 0 {
			c.Session.Charged = r.IntN(2) == 0
			c.Session.MaxSessions = varint()
			c.Session.Clock = varint()
		}
		if n := count(); n >= 0 {
			c.Session.IDs = make([]int64, n)
			for i := range c.Session.IDs {
				c.Session.IDs[i] = varint()
			}
		}
		if n := count(); n >= 0 {
			c.Session.Credits = make([]Credit, n)
			for i := range c.Session.Credits {
				c.Session.Credits[i] = Credit{ID: varint(), Nanos: varint()}
			}
		}
	}
	return c
}

func TestBinaryRoundTripRandom(t *testing.T) {
	s := seed(t)
	r := rand.New(rand.NewPCG(s, s))
	for i := range 5000 {
		c := randomCommand(r)
		b, err := Encode(c)
		require.NoError(t, err)
		require.Equal(t, cap(b), len(b), "seed %d, command %d: buffer not sized exactly", s, i)
		require.Equal(t, wantVersion(c), b[0], "seed %d, command %d: format", s, i)
		require.Equal(t, boundedByStruct(c), Bounded(b), "seed %d, command %d: Bounded", s, i)
		got, err := Decode(b)
		require.NoError(t, err, "seed %d, command %d", s, i)
		require.Equal(t, c, got, "seed %d, command %d", s, i)

		// Format 1, as older builds wrote it, still reads, but only the
		// kinds it knew.
		got, err = Decode(encodeV1(t, c))
		if c.Kind > maxKindV1 {
			require.ErrorIs(t, err, ErrMalformed, "seed %d, command %d", s, i)
			continue
		}
		require.NoError(t, err, "seed %d, command %d", s, i)
		require.Equal(t, normalizeV1(c), got, "seed %d, command %d (v1)", s, i)
	}
}

func TestDecodeV1(t *testing.T) {
	for name, c := range binaryCases() {
		if c.Kind > maxKindV1 {
			continue
		}
		got, err := Decode(encodeV1(t, c))
		require.NoError(t, err, name)
		require.Equal(t, normalizeV1(c), got, name)
	}
}

// TestDecodeV1Corpus decodes the format 1 seeds of the fuzz corpus, which
// older builds wrote, to the commands they were made from.
func TestDecodeV1Corpus(t *testing.T) {
	seeds := fuzzSeedCommands()
	for name, want := range map[string]*Command{
		"noop":                seeds[0],
		"session_create":      seeds[1],
		"session_end_expired": seeds[2],
		"txn":                 seeds[3],
	} {
		data := readCorpus(t, name)
		require.Equal(t, versionMsgpack, data[0], name)
		got, err := Decode(data)
		require.NoError(t, err, name)
		require.Equal(t, want, got, name)
	}
}

func readCorpus(t *testing.T, name string) []byte {
	raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecode", name))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 2)
	require.Equal(t, "go test fuzz v1", lines[0])
	lit, ok := strings.CutPrefix(lines[1], "[]byte(")
	require.True(t, ok)
	lit, ok = strings.CutSuffix(lit, ")")
	require.True(t, ok)
	s, err := strconv.Unquote(lit)
	require.NoError(t, err)
	return []byte(s)
}

// TestDecodeV2Corpus pins format 2: the v2 seeds of the fuzz corpus must
// keep decoding to the commands they were made from, and Encode must
// still write them byte for byte, or logs already written would change
// meaning.
func TestDecodeV2Corpus(t *testing.T) {
	cases := binaryCases()
	for file, name := range map[string]string{
		"v2_noop":           "noop",
		"v2_put":            "put",
		"v2_lock":           "lock",
		"v2_compares":       "compares",
		"v2_empty_lists":    "empty lists",
		"v2_nil_empty_val":  "nil and empty val",
		"v2_session_create": "session create",
		"v2_session_end":    "session expired",
		"v2_session_seen":   "session seen",
		"v2_session_credit": "session credit",
		"v2_txn_session":    "txn and session",
	} {
		data := readCorpus(t, file)
		got, err := Decode(data)
		require.NoError(t, err, file)
		require.Equal(t, cases[name], got, file)
		enc, err := Encode(got)
		require.NoError(t, err, file)
		require.Equal(t, data, enc, file)
	}
}

// TestTermIsAddedCompatibly pins how the session term was added: a
// command without one is written exactly as format 2 wrote it (so logs
// and members not yet upgraded read it as before), a format 2 session
// decodes with term 0 (valid in any term), and a command with one is
// format 3, which format 2 readers refuse by its version byte rather
// than misread.
func TestTermIsAddedCompatibly(t *testing.T) {
	old := readCorpus(t, "v2_session_end") // written before terms existed
	c, err := Decode(old)
	require.NoError(t, err)
	require.Zero(t, c.Session.Term)
	require.True(t, c.Session.Expired)

	c.Session.Term = 7
	b, err := Encode(c)
	require.NoError(t, err)
	require.Equal(t, versionTermed, b[0])
	// The same bytes as format 2 but for the version and the term's
	// varint right after the expired byte.
	want := append([]byte{versionTermed}, old[1:len(old)-2]...)
	want = append(want, 7)
	want = append(want, old[len(old)-2:]...)
	require.Equal(t, want, b)
	got, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, c, got)

	c.Session.Term = 0
	b, err = Encode(c)
	require.NoError(t, err)
	require.Equal(t, old, b, "without a term, format 2 byte for byte")
}

// TestBoundsAreAddedCompatibly pins how format 6 was added: a client's
// creation without a charge or a bound is written exactly as format 4
// wrote it, and with them it is the same bytes but for the version and
// the three fields right after the owner, which earlier readers refuse by
// the version byte rather than misread.
func TestBoundsAreAddedCompatibly(t *testing.T) {
	c := &Command{ID: 9, Kind: KindSessionCreate, Session: &Session{TTL: 5e9, Owner: "client:w"}}
	old, err := Encode(c)
	require.NoError(t, err)
	require.Equal(t, versionOwned, old[0])

	c.Session.Charged, c.Session.MaxSessions = true, 3
	b, err := Encode(c)
	require.NoError(t, err)
	require.Equal(t, versionBounded, b[0])
	// The lists (two nil counts) close both encodings.
	want := append([]byte{versionBounded}, old[1:len(old)-2]...)
	want = append(want, 1, 6, 0) // charged, MaxSessions 3 (zig-zag), Clock 0
	want = append(want, old[len(old)-2:]...)
	require.Equal(t, want, b)
	got, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, c, got)
}

// TestDecodeTruncated cuts valid encodings at every offset, and extends
// them by a byte: all malformed, none panics.
func TestDecodeTruncated(t *testing.T) {
	for name, c := range binaryCases() {
		b, err := Encode(c)
		require.NoError(t, err)
		if len(b) > 1000 {
			continue // the long case: its cuts teach nothing more
		}
		for i := range len(b) {
			got, err := Decode(b[:i])
			require.ErrorIs(t, err, ErrMalformed, "%s cut at %d", name, i)
			require.Nil(t, got)
		}
		for _, x := range []byte{0, 1, 0xff} {
			_, err := Decode(append(b[:len(b):len(b)], x))
			require.ErrorIs(t, err, ErrMalformed, "%s plus %#x", name, x)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	header := func(kind Kind, body byte) []byte {
		return append([]byte{versionBinary2, 1, 0, 0, 0, 0, 0, 0, 0}, byte(kind), body)
	}
	header3 := func(kind Kind, body byte) []byte {
		return append([]byte{versionTermed, 1, 0, 0, 0, 0, 0, 0, 0}, byte(kind), body)
	}
	header4 := func(kind Kind, body byte) []byte {
		return append([]byte{versionOwned, 1, 0, 0, 0, 0, 0, 0, 0}, byte(kind), body)
	}
	header5 := func(kind Kind, body byte) []byte {
		return append([]byte{versionLockDelay, 1, 0, 0, 0, 0, 0, 0, 0}, byte(kind), body)
	}
	header6 := func(kind Kind, body byte) []byte {
		return append([]byte{versionBounded, 1, 0, 0, 0, 0, 0, 0, 0}, byte(kind), body)
	}
	header7 := func(kind Kind, body byte) []byte {
		return append([]byte{Version, 1, 0, 0, 0, 0, 0, 0, 0}, byte(kind), body)
	}
	// nest is a Then of one OpTxn around body, n times.
	nest := func(n int, body []byte) []byte {
		for range n {
			body = append([]byte{0, 2, 0, byte(OpTxn), 0}, body...)
		}
		return body
	}
	trailer := []byte{0, 0, 0} // no actor, not admin, no read limit
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, data := range map[string][]byte{
		"kind 0":            header(0, 0),
		"kind past the end": header(maxKind+1, 0),
		"body flags":        header(KindNoop, 8),
		"huge if count":     cat(header(KindTxn, bodyTxn), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 1}),
		"count beyond data": cat(header(KindTxn, bodyTxn), []byte{1, 3, 1}, bytes.Repeat([]byte{0}, 9)),
		"counts together beyond data": cat(header(KindTxn, bodyTxn), []byte{3, 2, 2},
			bytes.Repeat([]byte{0}, 3*minCompare-1)),
		"key beyond data":    cat(header(KindTxn, bodyTxn), []byte{0, 2, 0, byte(OpGet), 0, 9, 0, 0}),
		"value beyond data":  cat(header(KindTxn, bodyTxn), []byte{0, 2, 0, byte(OpPut), 0, 0, 9, 0}),
		"op flags":           cat(header(KindTxn, bodyTxn), []byte{0, 2, 0, byte(OpGet), 2, 0, 0, 0}),
		"non-minimal varint": cat(header(KindTxn, bodyTxn), []byte{0, 2, 0, byte(OpGet), 0, 0x80, 0, 0, 0}),
		"varint overflow": cat(header(KindSessionEnd, bodySession),
			[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0}),
		"expired 2":      cat(header(KindSessionEnd, bodySession), []byte{0, 0, 2, 0, 0}),
		"huge ids count": cat(header(KindSessionSeen, bodySession), []byte{0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0}),
		"credits beyond": cat(header(KindSessionCredit, bodySession), []byte{0, 0, 0, 0, 3, 0, 0, 0}),
		"header only":    {versionBinary2},
		"v3 header only": {versionTermed},
		"v4 header only": {versionOwned},
		"v5 header only": {versionLockDelay},
		"v6 header only": {versionBounded},
		"v7 header only": {Version},
		// Format 7 is only for a transaction that nests one, at most
		// MaxNesting deep; in it an OpTxn is a nested body.
		"v7 flat txn":          cat(header7(KindTxn, bodyTxn), []byte{0, 0, 0}, trailer),
		"v7 noop":              header7(KindNoop, 0),
		"v7 too deep":          cat(header7(KindTxn, bodyTxn), nest(MaxNesting+1, []byte{0, 0, 0}), trailer),
		"v7 nested flags":      cat(header7(KindTxn, bodyTxn), []byte{0, 2, 0, byte(OpTxn), 1, 0, 0, 0}, trailer),
		"v7 nested cut":        cat(header7(KindTxn, bodyTxn), []byte{0, 2, 0, byte(OpTxn), 0, 0, 2}),
		"v7 nested count over": cat(header7(KindTxn, bodyTxn), []byte{0, 2, 0, byte(OpTxn), 0, 0, 0xff, 0x7f, 0}, trailer),
		"v7 trailer missing":   cat(header7(KindTxn, bodyTxn), nest(1, []byte{0, 0, 0})),
		// Format 6 is only for a command with a proposer, and only format
		// 6 carries one.
		"v5 with a proposer":   cat(header5(KindNoop, bodyProposer), []byte{0, 1, 1, 0, 0, 0}),
		"v2 with a proposer":   cat(header(KindNoop, bodyProposer), []byte{0, 1, 1, 0, 0, 0}),
		"v6 proposer cut":      cat(header6(KindNoop, bodyProposer), []byte{0, 1, 1}),
		"v6 owner beyond data": cat(header6(KindNoop, bodyProposer), []byte{9, 'c', 1, 1, 0, 0, 0}),
		"v6 resolve with txn":  cat(header6(KindResolve, bodyTxn|bodyProposer), []byte{0, 0, 0}, []byte{0, 1, 1, 0, 0, 0}),
		"v6 resolve, none":     header6(KindResolve, 0),
		// Format 6 is only for a silence mark, a charge, an owner's bound
		// or a clock; the charge byte is 0 or 1; kinds format 1 never had
		// are refused in it.
		"v6 none of it":    cat(header6(KindSessionCreate, bodySession), []byte{0, 2, 0, 0, 0, 0, 0, 0, 0, 0}),
		"v6 no session":    header6(KindNoop, 0),
		"v6 charge 2":      cat(header6(KindSessionCreate, bodySession), []byte{0, 2, 0, 0, 0, 2, 0, 0, 0, 0}),
		"v6 clock missing": cat(header6(KindSessionCreate, bodySession), []byte{0, 2, 0, 0, 0, 1, 0}),
		"v5 silent":        cat(header5(KindSessionSilent, bodySession), []byte{0, 0, 2, 6, 0, 0, 0}),
		"v4 silent":        cat(header4(KindSessionSilent, bodySession), []byte{0, 0, 0, 6, 0, 0, 0}),
		"v2 silent":        header(KindSessionSilent, 0),
		"v1 silent":        []byte("\x01\x81\xa4kind\x07"),
		// Format 6 is only for a transaction with an actor (or admin).
		"v6 no actor":       cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 0, 0}),
		"v6 no txn":         cat(header6(KindSessionEnd, bodySession), []byte{0x54, 0, 1, 0, 0, 0, 0}),
		"v6 actor missing":  cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0}),
		"v6 admin missing":  cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 1, 'c'}),
		"v6 admin 2":        cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 1, 'c', 2}),
		"v6 actor too long": cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 9, 'c', 0}),
		"v6 trailing byte":  cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 1, 'c', 0, 0, 0}),
		"v6 read limit cut": cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 1, 'c', 0}),
		// Format 4 is only for a session with an owner.
		"v4 empty owner":    cat(header4(KindSessionCreate, bodySession), []byte{0, 2, 0, 0, 0, 0, 0}),
		"v4 no session":     header4(KindNoop, 0),
		"v4 owner missing":  cat(header4(KindSessionCreate, bodySession), []byte{0, 2, 0, 0}),
		"v4 owner too long": cat(header4(KindSessionCreate, bodySession), []byte{0, 2, 0, 0, 9, 'c', 0, 0}),
		// Format 5 is only for an expiry flagged LockDelay; no other
		// format carries the flag.
		"v5 without the flag": cat(header5(KindSessionEnd, bodySession), []byte{0x54, 0, 1, 0, 0, 0, 0}),
		"v5 unknown flag":     cat(header5(KindSessionEnd, bodySession), []byte{0x54, 0, 7, 0, 0, 0, 0}),
		"v5 no session":       header5(KindNoop, 0),
		"v5 with bounds":      cat(header5(KindSessionCreate, bodySession), []byte{0, 2, 0, 0, 0, 1, 0, 0, 0, 0}),
		"v4 with the flag":    cat(header4(KindSessionEnd, bodySession), []byte{0x54, 0, 3, 0, 2, 'c', 0, 0}),
		// Format 6 is only for a transaction with a read limit, which no
		// other format carries.
		"v6 read limit 0":       cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 0, 0, 0}),
		"v6 read limit missing": cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 0, 0}),
		"v6 flagged, no txn":    cat(header6(KindSessionEnd, bodySession), []byte{0x54, 0, 3, 0, 0, 0, 0}),
		"v6 noop":               header6(KindNoop, 0),
		"v6 non-minimal limit":  cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 0, 0, 0x81, 0}),
		"v6 limit overflow":     cat(header6(KindTxn, bodyTxn), []byte{0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}),
		"v5 with a read limit":  cat(header5(KindTxn, bodyTxn|bodySession), []byte{0, 0, 0, 5, 0x54, 0, 3, 0, 0, 0, 0}),
		// Format 3 is only for a session with a term: term 0, no session
		// at all, or a missing term would be a second encoding.
		"v3 term 0":           cat(header3(KindSessionEnd, bodySession), []byte{0x54, 0, 1, 0, 0, 0}),
		"v3 no session":       header3(KindNoop, 0),
		"v3 txn, no session":  cat(header3(KindTxn, bodyTxn), []byte{0, 0, 0}),
		"v3 term missing":     cat(header3(KindSessionEnd, bodySession), []byte{0x54, 0, 1}),
		"v3 non-minimal term": cat(header3(KindSessionEnd, bodySession), []byte{0x54, 0, 1, 0x85, 0, 0, 0}),
		"short id":            {Version, 1, 2, 3},
		"missing txn":         header(KindTxn, bodyTxn),
		"missing session":     header(KindSessionEnd, bodySession),
	} {
		got, err := Decode(data)
		require.ErrorIs(t, err, ErrMalformed, name)
		require.Nil(t, got, name)
	}
}

func TestDecodeVersions(t *testing.T) {
	for _, v := range []byte{0, Version + 1, 0xff} {
		_, err := Decode([]byte{v, 0, 0, 0, 0, 0, 0, 0, 0, byte(KindNoop), 0})
		require.ErrorIs(t, err, ErrVersion, "version %d", v)
	}
	_, err := Decode(nil)
	require.ErrorIs(t, err, ErrMalformed)
}

// TestDecodeAllocationBound feeds counts as large as the bytes left can
// claim: what Decode allocates stays within a small multiple of the
// input, however the counts are spent.
func TestDecodeAllocationBound(t *testing.T) {
	const n = 1 << 14
	header := func(kind Kind, body byte) []byte {
		return []byte{versionBinary2, 0, 0, 0, 0, 0, 0, 0, 0, byte(kind), body}
	}
	for name, data := range map[string][]byte{
		// Then and Else nil, and n/5 compares of zeros (5 bytes each).
		"compares": bytes.Join([][]byte{header(KindTxn, bodyTxn),
			binary.AppendUvarint(nil, n/minCompare+1), {0, 0}, bytes.Repeat([]byte{0}, n)}, nil),
		// ID, TTL, Expired, then Credits nil and n IDs of one byte.
		"ids": bytes.Join([][]byte{header(KindSessionSeen, bodySession), {0, 0, 0},
			binary.AppendUvarint(nil, n+1), {0}, bytes.Repeat([]byte{0}, n)}, nil),
		// Claims one more ID than there are bytes.
		"ids beyond": bytes.Join([][]byte{header(KindSessionSeen, bodySession), {0, 0, 0},
			binary.AppendUvarint(nil, n+2), {0}, bytes.Repeat([]byte{0}, n)}, nil),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _ = Decode(data)
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(20*len(data)), name)
	}
}

// TestDecodeV1HugeLength is a regression test for format 1 commands that
// declare a string or binary far longer than themselves. msgpack v5.3.6
// allocates a megabyte or more for such a claim and keeps it in a pooled
// decoder, which grew by that much with every such command.
func TestDecodeV1HugeLength(t *testing.T) {
	for name, data := range map[string][]byte{
		"key":     []byte("\x01\x83\xa3\xcc\x02\xa1v\xdb\xdb\xdb\xdbk"),
		"bin":     []byte("\x01\x81\xa3txn\x81\xa2if\x91\x81\xa1v\xc6\xff\xff\xff\xff"),
		"ext":     []byte("\x01\x81\xa2id\xc9\x7f\xff\xff\xff\x01"),
		"array":   []byte("\x01\x81\xa3txn\x81\xa4then\xdd\x00\x01\x00\x00\xc0"),
		"map":     []byte("\x01\xdf\x00\x00\x10\x00\xa4kind\x01"),
		"map key": []byte("\x01\x81\xdb\x7f\xff\xff\xffkind\x01"),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			_, err := Decode(data)
			require.ErrorIs(t, err, ErrMalformed, name)
		}
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), name)
	}
}

func TestMemberEncodingUnchanged(t *testing.T) {
	m := &Member{Req: 3, Name: "a", Addr: "127.0.0.1:1"}
	b, err := EncodeMember(m)
	require.NoError(t, err)
	require.Equal(t, byte(1), b[0], "members stay in format 1")
	got, err := DecodeMember(b)
	require.NoError(t, err)
	require.Equal(t, m, got)
}

func benchCommands() []struct {
	name string
	c    func() *Command
} {
	return []struct {
		name string
		c    func() *Command
	}{{"put", putCommand}, {"lock", lockCommand}}
}

func BenchmarkEncode(b *testing.B) {
	for _, bc := range benchCommands() {
		c := bc.c()
		b.Run(bc.name+"/v1", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m, err := msgpack.Marshal(c)
				if err != nil {
					b.Fatal(err)
				}
				// As the old Encode did: one more copy, behind the version.
				out := make([]byte, 0, len(m)+1)
				_ = append(append(out, versionMsgpack), m...)
			}
		})
		b.Run(bc.name+"/v2", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Encode(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range benchCommands() {
		c := bc.c()
		v2, err := Encode(c)
		require.NoError(b, err)
		for _, v := range []struct {
			name string
			data []byte
		}{{"v1", encodeV1(b, c)}, {"v2", v2}} {
			b.Run(fmt.Sprintf("%s/%s", bc.name, v.name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(v.data)))
				for b.Loop() {
					if _, err := Decode(v.data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
