package coord

import (
	"context"
	"fmt"
	"strings"

	"github.com/coordcell/coord/internal/command"
)

// Txn is an atomic transaction: if every comparison holds, the Then
// operations run, otherwise the Else operations; either way as one change
// at one revision. Build it with If, Then and Else, run it with Commit. A
// Txn is used by one goroutine and committed once.
//
// An operation may itself be a transaction (OpTxn), as in etcd.
//
// A transaction whose operations are all gets (OpGet, OpGetPrefix, and
// nested transactions of gets) is a linearizable read, served from the
// member's state by read index, never through the log. Its gets together return at most Config.MaxReadBytes
// (ErrReadTooLarge past it), and so do those of a transaction that
// writes, which then changes nothing.
//
//	res, err := n.Txn(ctx).
//		If(coord.Version("config").Eq(3)).
//		Then(coord.OpPut("config", next)).
//		Else(coord.OpGet("config")).
//		Commit()
type Txn struct {
	b   *cellOps
	ctx context.Context
	txn command.Txn
	err error // the first invalid operation added, reported by Commit
	// prefix is the namespace of a Txn from a Namespace cell: prepended
	// to every key and prefix added (but an absolute Cmp's), stripped
	// from every key in the result. Set before anything is added.
	prefix string
}

// Txn starts a transaction bound to ctx.
func (c *cellOps) Txn(ctx context.Context) *Txn { return newTxn(ctx, c) }

func newTxn(ctx context.Context, b *cellOps) *Txn { return &Txn{b: b, ctx: ctx} }

// If adds comparisons; all must hold for Then to run.
func (t *Txn) If(cmps ...Cmp) *Txn {
	for _, c := range cmps {
		t.txn.If = append(t.txn.If, t.cmp(c))
	}
	return t
}

// cmp returns c's comparison in t's namespace.
func (t *Txn) cmp(c Cmp) command.Compare {
	if t.prefix != "" && !c.abs {
		t.note(nsKey(c.c.Key))
		c.c.Key = t.prefix + c.c.Key
	}
	return c.c
}

// Then adds the operations run when every comparison holds.
func (t *Txn) Then(ops ...Op) *Txn {
	for _, o := range ops {
		t.txn.Then = append(t.txn.Then, t.add(o))
	}
	return t
}

// Else adds the operations run when a comparison fails.
func (t *Txn) Else(ops ...Op) *Txn {
	for _, o := range ops {
		t.txn.Else = append(t.txn.Else, t.add(o))
	}
	return t
}

// TxnResult is what a committed transaction did.
type TxnResult struct {
	// Succeeded is true when the comparisons held and Then ran.
	Succeeded bool
	// Rev is the cell revision after the transaction (its writes' revision
	// if it wrote).
	Rev int64
	// Results holds one entry per operation of the branch that ran.
	Results []OpResult
}

// OpResult is what one operation of a transaction did.
type OpResult struct {
	// KVs holds the keys an OpGet found, or the key an OpPut wrote.
	KVs []KV
	// Deleted counts the keys an OpDelete removed.
	Deleted int64
	// Txn is what an OpTxn did: which of its branches ran (Succeeded),
	// with one result per operation of that branch (Results); its Rev is
	// the whole transaction's. Nil for every other operation.
	Txn *TxnResult
}

// add notes o's error, if it is the first, and returns o's operation
// in t's namespace (a nested transaction's compares and operations too).
func (t *Txn) add(o Op) command.Op {
	t.note(o.err)
	if n := o.nest; n != nil {
		in := &command.Txn{}
		for _, c := range n.cmps {
			in.If = append(in.If, t.cmp(c))
		}
		for _, op := range n.then {
			in.Then = append(in.Then, t.add(op))
		}
		for _, op := range n.els {
			in.Else = append(in.Else, t.add(op))
		}
		return command.Op{Type: command.OpTxn, Txn: in}
	}
	if t.prefix != "" {
		if !o.op.Prefix {
			// In a namespace an empty key would name the namespace's
			// own prefix as a key: refuse it as it is refused outside.
			t.note(nsKey(o.op.Key))
		}
		o.op.Key = t.prefix + o.op.Key
	}
	return o.op
}

// note keeps err if it is the first error of t.
func (t *Txn) note(err error) {
	if t.err == nil {
		t.err = err
	}
}

// Commit validates and runs the transaction. Invalid input (too many
// operations, oversized keys or values, an option an operation does not
// take, a branch that writes one key twice: two puts, a put and a delete
// of it, or a put under a prefix delete, as etcd refuses them, nested
// transactions' writes counted as OpTxn says) fails before anything is
// sent.
func (t *Txn) Commit() (TxnResult, error) {
	if t.err != nil {
		return TxnResult{}, t.err
	}
	res, err := commitTxn(t.ctx, t.b, &t.txn)
	if err != nil {
		return TxnResult{}, err
	}
	return TxnResult{Succeeded: res.Succeeded, Rev: res.Rev, Results: t.results(res.Ops, res.Rev)}, nil
}

// results is ops as the caller sees them: keys out of t's namespace, a
// nested transaction's results nested.
func (t *Txn) results(ops []command.OpResult, rev int64) []OpResult {
	out := make([]OpResult, len(ops))
	for i, r := range ops {
		out[i].Deleted = r.Deleted
		for _, kv := range r.KVs {
			kv := fromCmdKV(kv)
			kv.Key = strings.TrimPrefix(kv.Key, t.prefix)
			out[i].KVs = append(out[i].KVs, kv)
		}
		if r.Txn != nil {
			out[i].Txn = &TxnResult{Succeeded: r.Txn.Succeeded, Rev: rev, Results: t.results(r.Txn.Ops, rev)}
		}
	}
	return out
}

// Op is one operation of a transaction.
type Op struct {
	op   command.Op
	err  error   // why the operation is invalid; Commit reports it
	nest *nested // an OpTxn's transaction
}

// nested is an OpTxn's transaction, in the caller's terms: its keys take
// the namespace of the Txn it is added to.
type nested struct {
	cmps      []Cmp
	then, els []Op
}

// OpTxn is a nested transaction, etcd's RequestOp_RequestTxn: in the
// branch of the transaction it is added to, it runs then if every
// comparison of cmps holds, else els, and its result (OpResult.Txn) says
// which ran with one result per operation of that branch. Nested
// transactions may nest up to 8 deep, and every comparison, operation
// and nested transaction counts against Config.MaxTxnOps
// (ErrTooManyOps past either).
//
// Its semantics are etcd's exactly. All comparisons on the path, the
// transaction's own and those of every transaction nested in the branches
// that run, are evaluated against the state before the transaction's
// first operation: a nested comparison does not see the writes of the
// operations before it. The operations then run in their order, a nested
// transaction's in its place, and each sees the writes before it; all
// writes share the transaction's one revision. A key may not be written
// twice in a branch (ErrInvalidArgument), where a nested transaction's
// puts and deletes, of both its branches, count as written in the branch
// that holds it: its two branches may put the same key (only one runs);
// a put may not be covered by a delete of its own branch or of a nested
// transaction before it. A nested transaction may delete what an earlier
// one puts (the delete runs last and wins), as etcd allows.
//
//	res, err := n.Txn(ctx).Then(
//		coord.OpPut("jobs/7", spec),
//		coord.OpTxn([]coord.Cmp{coord.Version("jobs/count").Eq(0)},
//			[]coord.Op{coord.OpPut("jobs/count", one)},
//			[]coord.Op{coord.OpGet("jobs/count")}),
//	).Commit()
//	created := res.Results[1].Txn.Succeeded
func OpTxn(cmps []Cmp, then []Op, els []Op) Op {
	o := Op{op: command.Op{Type: command.OpTxn}, nest: &nested{cmps: cmps, then: then, els: els}}
	for _, ops := range [2][]Op{then, els} {
		for _, op := range ops {
			if o.err == nil {
				o.err = op.err
			}
		}
	}
	return o
}

// OpGet reads key.
func OpGet(key string) Op { return Op{op: command.Op{Type: command.OpGet, Key: key}} }

// OpGetPrefix reads every key under prefix. What it may return is
// bounded, with the transaction's other gets, by Config.MaxReadBytes; to
// read a large prefix, page it with List's Limit and After.
func OpGetPrefix(prefix string) Op {
	return Op{op: command.Op{Type: command.OpGet, Key: prefix, Prefix: true}}
}

// OpPut writes value under key. Of the write options only Ephemeral
// applies inside a transaction: conditions go in If, so a transaction
// given OpPut with IfVersion fails at Commit with ErrInvalidArgument
// rather than drop the condition.
func OpPut(key string, value []byte, opts ...WriteOption) Op {
	o := writeOpts(opts)
	op := Op{op: command.Op{Type: command.OpPut, Key: key, Value: value, Session: o.session}}
	if o.ifVersion != nil {
		op.err = fmt.Errorf("%w: OpPut(%q) with IfVersion: inside a transaction, put the condition in If (Version(key).Eq(v))",
			ErrInvalidArgument, key)
	}
	return op
}

// OpDelete deletes key.
func OpDelete(key string) Op { return Op{op: command.Op{Type: command.OpDelete, Key: key}} }

// OpDeletePrefix deletes every key under prefix.
func OpDeletePrefix(prefix string) Op {
	return Op{op: command.Op{Type: command.OpDelete, Key: prefix, Prefix: true}}
}

// Cmp is one comparison of a transaction. Build it from a target:
// Version(key).Eq(0), Value(key).Eq(b), CreateRev(key).Lt(r), ModRev(key).Gt(r).
// An absent key has version, create and mod revision 0 and a nil value.
//
// In a transaction of a Namespace cell the key is in the namespace,
// except in a Cmp a recipe made (Mutex.IsOwner): that one names the
// recipe's own key, which lives outside every namespace.
type Cmp struct {
	c command.Compare
	// abs marks a recipe's Cmp, whose key is absolute: no namespace
	// applies to it.
	abs bool
}

// absolute returns c marked as naming its key outside any namespace; a
// recipe marks every Cmp it hands out so.
func (c Cmp) absolute() Cmp {
	c.abs = true
	return c
}

// IntTarget is an integer field of a key, to compare.
type IntTarget struct {
	key    string
	target command.CompareTarget
}

// Version targets the key's version (0 = absent).
func Version(key string) IntTarget { return IntTarget{key, command.TargetVersion} }

// CreateRev targets the revision that created the key (0 = absent).
func CreateRev(key string) IntTarget { return IntTarget{key, command.TargetCreateRev} }

// ModRev targets the revision of the key's last put (0 = absent).
func ModRev(key string) IntTarget { return IntTarget{key, command.TargetModRev} }

// SessionOf targets the session that owns the key, an ephemeral key's
// (its Session.ID as an int64); 0 for an ordinary key or an absent one.
// It is etcd's lease compare: SessionOf(k).Eq(int64(s.ID())) holds while
// k is s's. (It cannot be called Session: that is the session type.)
func SessionOf(key string) IntTarget { return IntTarget{key, command.TargetSession} }

func (t IntTarget) cmp(op command.CompareOp, v int64) Cmp {
	return Cmp{c: command.Compare{Key: t.key, Target: t.target, Op: op, Int: v}}
}

// Eq holds when the field equals v.
func (t IntTarget) Eq(v int64) Cmp { return t.cmp(command.Equal, v) }

// Ne holds when the field differs from v.
func (t IntTarget) Ne(v int64) Cmp { return t.cmp(command.NotEqual, v) }

// Lt holds when the field is less than v.
func (t IntTarget) Lt(v int64) Cmp { return t.cmp(command.Less, v) }

// Gt holds when the field is greater than v.
func (t IntTarget) Gt(v int64) Cmp { return t.cmp(command.Greater, v) }

// ValueTarget is a key's value, to compare bytewise.
type ValueTarget struct{ key string }

// Value targets the key's value.
func Value(key string) ValueTarget { return ValueTarget{key} }

func (t ValueTarget) cmp(op command.CompareOp, v []byte) Cmp {
	return Cmp{c: command.Compare{Key: t.key, Target: command.TargetValue, Op: op, Value: v}}
}

// Eq holds when the value equals v.
func (t ValueTarget) Eq(v []byte) Cmp { return t.cmp(command.Equal, v) }

// Ne holds when the value differs from v.
func (t ValueTarget) Ne(v []byte) Cmp { return t.cmp(command.NotEqual, v) }

// Lt holds when the value sorts before v.
func (t ValueTarget) Lt(v []byte) Cmp { return t.cmp(command.Less, v) }

// Gt holds when the value sorts after v.
func (t ValueTarget) Gt(v []byte) Cmp { return t.cmp(command.Greater, v) }
