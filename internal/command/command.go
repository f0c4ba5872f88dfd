// Package command defines what the cell replicates: the commands proposed
// to Raft, and the results the state machine hands back to the waiting
// caller. Every encoding starts with a format version byte, so that a node
// refuses (rather than misreads) a command written by a newer node.
//
// Commands are written in a hand-made binary form (versions 2 to 7, see
// binary.go), because they are decoded on every member for every write and
// msgpack's reflection cost a measurable share of the CPU. Version 1, the
// msgpack form, is still read: logs written by older builds must keep
// applying. Members, rare, are still msgpack.
package command

import (
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/mpcheck"
	"github.com/vmihailenco/msgpack/v5"
)

// Version is the newest format version Encode writes, and the newest
// Decode reads. A node refuses a command whose version it does not know
// rather than apply a guess at its meaning: members of one cell are
// upgraded one at a time, so a log may hold commands from a newer build,
// and misreading one would make this member's state differ from the
// others'.
//
// Encode writes format 3, 4, 5 or 6 only for a command that needs it (a
// session command carrying a leader's term, a client's session creation
// carrying its owner, an expiry that must leave lock-delay markers, a
// command that names its proposer for exactly-once application, a
// session creation that counts against the quota or its owner's bound, a
// leader's silence marks, a client's writing transaction carrying its
// actor, a transaction whose reads are bounded by Txn.ReadLimit); every
// other command is written in format 2, byte for byte as before. So a
// member not yet upgraded halts (and replays after its upgrade) only on
// the commands whose meaning it would get wrong, and keeps applying all
// the others.
//
// Format 7 is format 6 whose transaction nests transactions (OpTxn): it
// is written only for those, so a member of an older build halts on a
// nested transaction, which it would misapply, and on nothing else.
const Version byte = 7

// versionBounded is format 6: the binary format with the session bounds
// and clock, the transaction's actor and read limit, and the proposer,
// without nested transactions.
const versionBounded byte = 6

// versionLockDelay is the binary format with the session term, owner and
// lock-delay flag, without format 6's additions.
const versionLockDelay byte = 5

// versionOwned is the binary format with the session term and owner,
// without the lock-delay flag.
const versionOwned byte = 4

// versionTermed is the binary format with the session term and without
// the owner.
const versionTermed byte = 3

// versionBinary2 is the binary format without the session term.
const versionBinary2 byte = 2

// versionMsgpack is the msgpack format: what commands were before
// version 2, and what members still are. Members keep this byte so their
// encoding, found in conf changes of old logs, does not change.
const versionMsgpack byte = 1

// ErrVersion is returned when a command carries a format version this
// node does not understand.
var ErrVersion = errors.New("command: unknown format version")

// ErrMalformed is returned for bytes that do not decode as a command.
var ErrMalformed = errors.New("command: malformed")

// Kind says which part of the state machine a command addresses.
type Kind uint8

const (
	// KindTxn is a transaction: compares, then one of two op lists.
	KindTxn Kind = iota + 1
	// KindSessionCreate opens a session; its ID is the entry's log index.
	KindSessionCreate
	// KindSessionEnd ends a session (close or expiry) and deletes all its
	// ephemeral keys in one revision.
	KindSessionEnd
	// KindNoop changes nothing; used to confirm leadership and to flush.
	KindNoop
	// KindSessionSeen records that the leader heard from the sessions in
	// Session.IDs: their unheard time returns to zero. Proposed only for
	// sessions whose unheard time is not already zero, so a cell whose
	// sessions are all alive writes nothing.
	KindSessionSeen
	// KindSessionCredit adds to each listed session's unheard time the
	// span during which a leader held office without hearing from it.
	// A new leader grants a session only its TTL minus that time, so a
	// dead session cannot be kept alive by leaders that keep changing.
	KindSessionCredit
	// KindSessionSilent is a leader's record of sessions it found silent
	// (format 6 only): Session.Clock moves the cell's session clock
	// forward to the time this leader has held office for, and each of
	// Session.Credits marks a session silent since the clock read Nanos.
	// A session's unheard time is then the clock's advance since its
	// mark: silence costs one write per session when it starts, and the
	// clock one small entry now and then, not a credit per silent session
	// per interval. An entry with no marks only moves the clock.
	KindSessionSilent
	// KindResolve settles the outcome of another command of the same
	// proposer (Proposer names it: its owner, ID and Seq): if that
	// command applied, its recorded result is the result; if not, it is
	// recorded as never to apply, so a copy still in flight changes
	// nothing when it arrives. Written in format 6 only.
	KindResolve

	maxKind = KindResolve
	// maxKindV1 is the last kind format 1 can carry: it predates the rest.
	maxKindV1 = KindSessionCredit
)

// OpType is the type of one operation inside a transaction.
type OpType uint8

const (
	// OpGet reads a key (or, with Prefix, every key under it).
	OpGet OpType = iota + 1
	// OpPut writes a key.
	OpPut
	// OpDelete deletes a key (or, with Prefix, every key under it).
	OpDelete
	// OpTxn runs a nested transaction, Op.Txn (format 7). Its compares,
	// like those of every transaction nested in the branch that runs,
	// are evaluated against the state before the top transaction's first
	// op, as etcd evaluates a nested RequestTxn's; its ops run in their
	// place in the branch, after the ops before it, and see their writes.
	// All the writes share the top transaction's revision.
	OpTxn
)

// MaxNesting is how many levels of transactions may nest below the top
// one: a transaction nested in a transaction nested in the top one is
// two deep. etcd bounds nesting only by its op count; coord bounds it too
// so that no encoding can make a member recurse further (the decoder,
// the proposer's checks and the state machine all walk nested ops).
const MaxNesting = 8

// Op is one operation of a transaction.
type Op struct {
	Type    OpType `msgpack:"t"`
	Key     string `msgpack:"k"`
	Value   []byte `msgpack:"v,omitempty"`
	Prefix  bool   `msgpack:"p,omitempty"`
	Session int64  `msgpack:"s,omitempty"` // owning session of an ephemeral put; 0 = none
	// Txn is an OpTxn's nested transaction (format 7 only); its Actor,
	// Admin and ReadLimit are not encoded (the top transaction's apply to
	// it), nor are the op's Key, Value, Prefix and Session.
	Txn *Txn `msgpack:"-"`
}

// CompareTarget names the field of a key a Compare looks at.
type CompareTarget uint8

const (
	// TargetVersion compares the key's version (0 = absent).
	TargetVersion CompareTarget = iota + 1
	// TargetValue compares the key's value bytes.
	TargetValue
	// TargetCreateRev compares the key's create revision (0 = absent).
	TargetCreateRev
	// TargetModRev compares the key's last modification revision (0 = absent).
	TargetModRev
	// TargetSession compares the key's owning session (0 = none or absent).
	TargetSession
)

// CompareOp is the relation a Compare checks.
type CompareOp uint8

const (
	// Equal holds when the field equals the operand.
	Equal CompareOp = iota + 1
	// NotEqual holds when it differs.
	NotEqual
	// Less holds when the field is less than the operand.
	Less
	// Greater holds when the field is greater than the operand.
	Greater
)

// Compare is one condition of a transaction. Integer targets use Int,
// TargetValue uses Value (compared bytewise).
type Compare struct {
	Key    string        `msgpack:"k"`
	Target CompareTarget `msgpack:"t"`
	Op     CompareOp     `msgpack:"o"`
	Int    int64         `msgpack:"i,omitempty"`
	Value  []byte        `msgpack:"v,omitempty"`
}

// Txn is a transaction: if every Compare holds, Then runs, else Else runs.
// All its writes share one revision.
type Txn struct {
	If   []Compare `msgpack:"if,omitempty"`
	Then []Op      `msgpack:"then,omitempty"`
	Else []Op      `msgpack:"else,omitempty"`
	// Actor, on a transaction a member proposes for a client, names that
	// client as its sessions' owner does ("client:" and its identity).
	// The state machine then lets the transaction's branch run only if
	// every ephemeral put is for a session of that owner and, unless
	// Admin, every key it deletes or overwrites (each key under a prefix
	// delete included) is not an ephemeral key of another owner's session
	// nor a lock-delay marker; otherwise nothing changes
	// (StatusForbidden). Empty for a member's own transactions, which
	// these rules do not restrict. Written in format 6 only.
	Actor string `msgpack:"-"`
	// Admin, with Actor, lifts the rule on other owners' keys (the
	// client's grant says admin); its ephemeral puts are still its own.
	Admin bool `msgpack:"-"`
	// ReadLimit, when positive, bounds what the gets of the branch that
	// runs may read, in ReadCost units: each get counts the keys it
	// would find in the state before the transaction, and those the
	// branch puts before it, as if the branch's deletes had not happened
	// (an upper bound known before anything is written). Past the limit
	// the transaction fails with StatusReadTooLarge and changes nothing. A transaction with a read
	// limit is also held to the rule its proposer checks: no branch
	// writes one key twice (two puts, a put and a delete of the key, a
	// put under a prefix delete), else StatusInvalid. Zero, as every
	// command before format 6, means neither rule applies, so a log
	// written by older members replays as they applied it. Written in
	// format 6 only.
	ReadLimit int64 `msgpack:"-"`
}

// ReadCostOverhead is what ReadCost adds to each key read for its
// bookkeeping: a bound on its encoding besides the key and value bytes
// (in results and on the client protocol), and about what a KV costs in
// memory. It is part of format 6's meaning: never change it.
const ReadCostOverhead = 64

// ReadCost is what reading one key costs against a read limit
// (Txn.ReadLimit, and the members' bound on every read): its key and
// value bytes and ReadCostOverhead.
func ReadCost(key string, value []byte) int64 {
	return int64(len(key)) + int64(len(value)) + ReadCostOverhead
}

// Session carries the arguments of session commands.
type Session struct {
	ID  int64 `msgpack:"id,omitempty"`  // KindSessionEnd: the session to end
	TTL int64 `msgpack:"ttl,omitempty"` // KindSessionCreate: time to live in nanoseconds
	// Expired marks an end by expiry (decided by the leader) rather than
	// by the holder's Close.
	Expired bool `msgpack:"exp,omitempty"`
	// Term, when non-zero, is the term of the leader that decided the
	// command (an expiry from its deadline table, a credit of unheard
	// time, a seen mark): the command is valid only if its entry was
	// appended in that same term, so a deposed leader's decision, made
	// from a deadline table that went stale while it did not know it had
	// lost office, never applies. Zero (a holder's Close or its own local
	// expiry) is valid in any term.
	Term uint64 `msgpack:"term,omitempty"`
	// IDs lists the sessions of a KindSessionSeen.
	IDs []int64 `msgpack:"ids,omitempty"`
	// Credits lists the unheard time of a KindSessionCredit, or the
	// silence marks of a KindSessionSilent (Nanos: the session clock when
	// the session went silent).
	Credits []Credit `msgpack:"cr,omitempty"`
	// Owner, on a KindSessionCreate proposed for a client (coord.Connect),
	// names that client ("client:" and its authenticated identity): the
	// session is stored with it, so every member can refuse another
	// client's keep-alives, ephemeral writes and ends for it. Empty for a
	// member's own sessions. Written in formats 4 and 5 only.
	Owner string `msgpack:"-"`
	// LockDelay, on an expiry (Expired), asks the state machine to leave
	// a lock-delay marker for each lock the session held with a delay
	// (coord.WithLockDelay). The proposer sets it when the session owns
	// such a key; it is what makes such an expiry format 5, so a member
	// that would not write the markers halts on it instead of diverging.
	LockDelay bool `msgpack:"-"`
	// Charged, on a KindSessionCreate, makes the session's record count
	// against the quota (storage.Options.QuotaBytes) as a key's bytes do.
	// This build sets it on every creation; a creation without it comes
	// from an older build's log and is applied as that build applied it.
	// Format 6 only.
	Charged bool `msgpack:"-"`
	// MaxSessions, on a KindSessionCreate with an Owner, is the most
	// sessions that owner may hold in the cell once this one is created:
	// the state machine refuses the creation (StatusTooManySessions) when
	// the owner already holds that many. 0 = no bound. The proposing
	// member sets it from its own configuration, and the count is the
	// replicated state's, so a client that spreads its creations over
	// members is bounded all the same. Format 6 only.
	MaxSessions int64 `msgpack:"-"`
	// Clock, on a KindSessionSilent, is the session clock this leader
	// moves the cell's to (nanoseconds; it never moves back). Format 6
	// only.
	Clock int64 `msgpack:"-"`
}

// Credit is unheard time (nanoseconds) to add to one session.
type Credit struct {
	ID    int64 `msgpack:"id"`
	Nanos int64 `msgpack:"ns"`
}

// Proposer names the command's origin for exactly-once application (the
// Raft dissertation, section 6.3): the state machine keeps the result of
// each proposer's recent commands, so a command proposed again (a
// forward that may have been dropped, a retry through another member or
// to a new leader) applies once and every copy gets the first result.
type Proposer struct {
	// Owner binds the proposer to an authenticated identity: "" for a
	// member, "client:" and the identity for a client's commands (set by
	// the member that admits them, never by the client), so no client can
	// name another's proposer.
	Owner string
	// ID names one proposer of the owner: a member's boot, a client
	// instance. Random, so restarts never meet an old record.
	ID uint64
	// Seq numbers the proposer's commands from 1. With Key set it is 0.
	Seq uint64
	// Floor is the lowest Seq whose result the proposer may still ask for:
	// the state machine forgets results below it, and refuses a command
	// below it that it does not know (an old copy of a command answered
	// long ago).
	Floor uint64
	// Born is the proposing member's applied index when the command's
	// call began. A command of a proposer the state machine has no record
	// of is refused when Born is below the retirement horizon, since its
	// record may have been retired with the result in it.
	Born uint64
	// Key, when not empty, is a caller's own idempotency key: the
	// command's record is found by (Owner, Key) rather than (Owner, ID,
	// Seq), so a caller may resubmit it after a restart.
	Key string
}

// Command is one replicated request.
type Command struct {
	// ID identifies the request so the proposing node can wake its waiter
	// when the entry applies. Unique per proposing node and incarnation;
	// zero for commands nobody waits on.
	ID      uint64   `msgpack:"id"`
	Kind    Kind     `msgpack:"kind"`
	Txn     *Txn     `msgpack:"txn,omitempty"`
	Session *Session `msgpack:"ses,omitempty"`
	// Proposer, when set, makes the command exactly-once (format 6).
	Proposer *Proposer `msgpack:"-"`
}

// Encode returns the versioned encoding of c, in the oldest format that
// carries it (see binary.go). A transaction that nests another and also
// holds an OpTxn without its Txn has none: ErrMalformed.
func Encode(c *Command) ([]byte, error) {
	if c == nil {
		return nil, errors.New("command: encode nil command")
	}
	if nested(c) && c.Txn.lostOp() {
		// In format 7 every OpTxn is a nested body: one without its
		// transaction has no encoding there.
		return nil, fmt.Errorf("%w: an OpTxn without its transaction", ErrMalformed)
	}
	return encodeBinary(c), nil
}

// Decode parses an encoded command of format version 1 to 7. It never
// panics on arbitrary input. The command shares no memory with data.
func Decode(data []byte) (*Command, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrMalformed)
	}
	switch data[0] {
	case Version, versionBounded, versionLockDelay, versionOwned, versionTermed, versionBinary2:
		return decodeBinary(data[0], data[1:])
	case versionMsgpack:
		return decodeMsgpack(data[1:])
	default:
		return nil, fmt.Errorf("%w: %d", ErrVersion, data[0])
	}
}

// Status is the outcome of applying a command. The state machine decides it
// deterministically, so every node reaches the same one.
type Status uint8

const (
	// StatusOK means the command applied (for a Txn: see Result.Succeeded).
	StatusOK Status = iota
	// StatusQuotaExceeded means the write would take the keyspace past its
	// quota; nothing changed.
	StatusQuotaExceeded
	// StatusNoSession means an ephemeral put named a session that does not
	// exist (expired or never created); nothing changed.
	StatusNoSession
	// StatusInvalid means the command broke a limit the proposer should
	// have checked (key or value size, op count); nothing changed.
	StatusInvalid
	// StatusStaleTerm means a leader's session decision (Session.Term)
	// reached the log in another term than the one it was decided in: the
	// leader that decided it no longer led, so nothing changed.
	StatusStaleTerm
	// StatusReadTooLarge means a transaction's gets would have read more
	// than its Txn.ReadLimit; nothing changed.
	StatusReadTooLarge
	// StatusTooManySessions means a session creation was refused because
	// its owner already holds Session.MaxSessions sessions in the cell;
	// nothing changed.
	StatusTooManySessions
	// StatusRetired means the command's proposer record was retired (or
	// its sequence number fell below the proposer's floor) before this
	// copy applied: it changed nothing now, and whether an earlier copy
	// applied is no longer known.
	StatusRetired
	// StatusNotApplied is a KindResolve's answer (and, afterwards, the
	// answer to every copy of the command it settled): the command never
	// applied and never will.
	StatusNotApplied
	// StatusForbidden means a client's transaction (Txn.Actor) would
	// have written for, or over, a session that is not its own; nothing
	// changed.
	StatusForbidden
)

// KV is a key as stored, returned in results.
type KV struct {
	Key       string
	Value     []byte
	Version   int64
	CreateRev int64
	ModRev    int64
	Session   int64
}

// OpResult is the outcome of one Op.
type OpResult struct {
	// KVs holds what an OpGet found, or for OpPut the key as written.
	KVs []KV
	// Deleted counts the keys an OpDelete removed.
	Deleted int64
	// Txn is what an OpTxn did: which branch of the nested transaction
	// ran and its ops' results. Nil for every other op.
	Txn *TxnResult
}

// TxnResult is the outcome of a nested transaction (OpTxn).
type TxnResult struct {
	// Succeeded reports which branch ran.
	Succeeded bool
	// Ops holds one result per op of that branch.
	Ops []OpResult
}

// Result is what applying a command yields to the caller that proposed it.
type Result struct {
	Status Status
	// Rev is the cell revision after this command: the revision of its
	// writes if it wrote, else the current revision.
	Rev int64
	// Succeeded reports which branch of a Txn ran.
	Succeeded bool
	// Ops holds one result per op of the branch that ran.
	Ops []OpResult
	// SessionID is the ID of a session created by KindSessionCreate, or
	// of the session a KindSessionEnd ended (zero if it had already
	// ended).
	SessionID int64
	// Repeat is set on the result of a copy of a command that had already
	// applied: the result is the first copy's, as recorded.
	Repeat bool
	// Trimmed is set when Repeat's recorded result had its read values
	// dropped (a transaction whose reads outgrew what the proposer table
	// keeps per result): the command applied, its reads are gone.
	Trimmed bool
}

// Member describes a member in a membership change: it travels as the
// Context of a Raft ConfChangeV2, so every member learns the new member's
// name and address from the log, and Req lets the proposer recognise the
// change when it applies (a change Raft dropped never does).
//
// ClientAddr is where the member serves clients: a ConfChangeUpdateNode
// the member proposes for itself carries it into the address book. It
// is omitted when empty, so every other change encodes as before, and a
// member that does not know the field ignores it (msgpack skips unknown
// fields), as Raft ignores the UpdateNode.
//
// PeerAddr, set only by an operator's ConfChangeUpdateNode (UpdateMember),
// moves the member's transport address in the address book: a field of
// its own, so that a member's own announcement, which carries the Addr
// it had, can never move it back. It is omitted when empty; a member that
// does not know it ignores it, keeping the old address (UpdateMember
// wants every member on a version that knows it, and says so).
type Member struct {
	Req        uint64 `msgpack:"r"`
	Name       string `msgpack:"n"`
	Addr       string `msgpack:"a"`
	ClientAddr string `msgpack:"c,omitempty"`
	PeerAddr   string `msgpack:"p,omitempty"`
}

// EncodeMember returns the versioned encoding of m.
func EncodeMember(m *Member) ([]byte, error) {
	b, err := msgpack.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte{versionMsgpack}, b...), nil
}

// DecodeMember parses an encoded Member; it never panics on bad input.
func DecodeMember(data []byte) (*Member, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty member", ErrMalformed)
	}
	if data[0] != versionMsgpack {
		return nil, fmt.Errorf("%w: %d", ErrVersion, data[0])
	}
	if err := mpcheck.Check(data[1:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var m Member
	if err := msgpack.Unmarshal(data[1:], &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return &m, nil
}
