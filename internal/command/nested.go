package command

import "iter"

// Nested transactions (OpTxn), as etcd's RequestOp_RequestTxn: the
// compares of the top transaction and of every transaction nested in the
// branches that run are evaluated first, against the state before the
// top transaction (etcd's compareToPath, over the read view the
// transaction starts with); then the ops of the branches chosen run in
// their order, depth first (etcd's executeTxn), each seeing the writes
// before it, all at one revision. Plan does the first step and returns
// the ops of the second as one flat branch, so the state machine runs a
// nested transaction with the code that runs a flat one.

// nests reports whether op is a nested transaction.
func (op *Op) nests() bool { return op.Type == OpTxn && op.Txn != nil }

// Nests reports whether a branch of t holds a nested transaction.
func (t *Txn) Nests() bool {
	for _, ops := range [2][]Op{t.Then, t.Else} {
		for i := range ops {
			if ops[i].nests() {
				return true
			}
		}
	}
	return false
}

// lostOp reports whether an OpTxn of t, at any depth, has no Txn.
func (t *Txn) lostOp() bool {
	for _, ops := range [2][]Op{t.Then, t.Else} {
		for i := range ops {
			switch op := &ops[i]; {
			case op.Type == OpTxn && op.Txn == nil:
				return true
			case op.nests() && op.Txn.lostOp():
				return true
			}
		}
	}
	return false
}

// Size is what t counts against a limit of operations: its compares and
// ops, and for a nested transaction its own op and everything in it.
func (t *Txn) Size() int {
	n := len(t.If) + len(t.Then) + len(t.Else)
	for _, ops := range [2][]Op{t.Then, t.Else} {
		for i := range ops {
			if ops[i].nests() {
				n += ops[i].Txn.Size()
			}
		}
	}
	return n
}

// Depth is how deep transactions nest in t: 0 for a flat one. A caller
// checks Size first, which bounds the recursion.
func (t *Txn) Depth() int {
	d := 0
	for _, ops := range [2][]Op{t.Then, t.Else} {
		for i := range ops {
			if ops[i].nests() {
				d = max(d, 1+ops[i].Txn.Depth())
			}
		}
	}
	return d
}

// AllOps yields every op of both branches of t and of every transaction
// nested in them (whichever would run), but not the OpTxn ops themselves:
// each get, put and delete t could run, for the checks that hold for
// every one (a client's write grant, key and value sizes).
func (t *Txn) AllOps() iter.Seq[*Op] {
	return func(yield func(*Op) bool) { t.allOps(yield) }
}

func (t *Txn) allOps(yield func(*Op) bool) bool {
	for _, ops := range [2][]Op{t.Then, t.Else} {
		for i := range ops {
			op := &ops[i]
			if op.nests() {
				if !op.Txn.allOps(yield) {
					return false
				}
				continue
			}
			if !yield(op) {
				return false
			}
		}
	}
	return true
}

// Plan is the path a nested transaction takes: which branch of each
// transaction on it runs. Its zero value (nil) is a flat transaction's.
type Plan struct {
	top  []Op   // the top transaction's branch that runs
	path []bool // each nested transaction met, depth first: whether its compares held
}

// Plan evaluates t's compares with holds, and those of every transaction
// nested in the branches that run, before any op runs (so all against
// the state before t), and returns whether t's own held, the ops to run
// in their order (no OpTxn among them), and the plan that puts their
// results back in shape (Nest). For a flat t, ops is the branch itself
// and the plan nil: nothing is allocated. holds must not write.
func (t *Txn) Plan(holds func(*Compare) bool) (ok bool, ops []Op, p *Plan) {
	ok = allHold(t.If, holds)
	branch := t.Then
	if !ok {
		branch = t.Else
	}
	if !t.Nests() {
		return ok, branch, nil
	}
	p = &Plan{top: branch}
	return ok, p.flatten(branch, holds, nil), p
}

func allHold(cmps []Compare, holds func(*Compare) bool) bool {
	for i := range cmps {
		if !holds(&cmps[i]) {
			return false
		}
	}
	return true
}

func (p *Plan) flatten(branch []Op, holds func(*Compare) bool, flat []Op) []Op {
	for i := range branch {
		op := &branch[i]
		if !op.nests() {
			flat = append(flat, *op)
			continue
		}
		ok := allHold(op.Txn.If, holds)
		p.path = append(p.path, ok)
		inner := op.Txn.Then
		if !ok {
			inner = op.Txn.Else
		}
		flat = p.flatten(inner, holds, flat)
	}
	return flat
}

// Nest returns the results of the flat ops of p's transaction (one per
// op Plan returned, in order) in the transaction's shape: one per op of
// the branch that ran, an OpTxn's holding its own branch's. A nil plan's
// are flat already.
func (p *Plan) Nest(flat []OpResult) []OpResult {
	if p == nil {
		return flat
	}
	var i, j int
	var build func(ops []Op) []OpResult
	build = func(ops []Op) []OpResult {
		if len(ops) == 0 {
			return nil
		}
		out := make([]OpResult, len(ops))
		for k := range ops {
			op := &ops[k]
			if !op.nests() {
				out[k] = flat[i]
				i++
				continue
			}
			ok := p.path[j]
			j++
			inner := op.Txn.Then
			if !ok {
				inner = op.Txn.Else
			}
			out[k].Txn = &TxnResult{Succeeded: ok, Ops: build(inner)}
		}
		return out
	}
	out := build(p.top)
	if out == nil {
		out = []OpResult{}
	}
	return out
}

// Ran walks ops, a branch that ran, with res, its results in its shape,
// calling fn with each op but an OpTxn and its result, depth first: what
// the proposer table does to each op's kept result. Results missing (a
// shorter res, a nested one without its Txn) end the walk of that branch.
func Ran(ops []Op, res []OpResult, fn func(op *Op, r *OpResult)) {
	for i := range min(len(ops), len(res)) {
		op, r := &ops[i], &res[i]
		if !op.nests() {
			fn(op, r)
			continue
		}
		if r.Txn == nil {
			continue
		}
		inner := op.Txn.Then
		if !r.Txn.Succeeded {
			inner = op.Txn.Else
		}
		Ran(inner, r.Txn.Ops, fn)
	}
}

// writeSet is what a branch writes, for nestedDuplicate: the keys it
// puts (in order, and as a set) and the keys and prefixes it deletes.
type writeSet struct {
	puts     []string
	put      map[string]bool
	deleted  map[string]bool // point deletes
	prefixes map[string]bool // prefix deletes
}

func newWriteSet() *writeSet {
	return &writeSet{put: map[string]bool{}, deleted: map[string]bool{}, prefixes: map[string]bool{}}
}

// deletes reports whether a delete of s covers key: O(len(key)).
func (s *writeSet) deletes(key string) bool {
	if s.deleted[key] {
		return true
	}
	for i := 0; i <= len(key); i++ {
		if s.prefixes[key[:i]] {
			return true
		}
	}
	return false
}

func (s *writeSet) addPut(key string) {
	s.put[key] = true
	s.puts = append(s.puts, key)
}

func (s *writeSet) addDeletes(o *writeSet) {
	for k := range o.deleted {
		s.deleted[k] = true
	}
	for p := range o.prefixes {
		s.prefixes[p] = true
	}
}

// nestedDuplicate is etcd's checkIntervals (server/etcdserver/api/v3rpc/
// key.go), with coord's prefix deletes for etcd's ranges: a branch may
// not put a key twice, nor put a key a delete covers, where the puts and
// deletes of a nested transaction count as the branch's (both of its
// branches: they are checked before anyone knows which runs). Exactly as
// etcd: the nested transaction's two branches may put the same key (only
// one runs) and may put a key the other deletes; a put of the branch, or
// of a later nested transaction, is checked against the deletes of this
// level and of the nested transactions before it, so a nested
// transaction may delete a key an earlier one puts (the delete runs
// second and wins) but not the other way round. Deletes may overlap.
func nestedDuplicate(ops []Op) (string, bool) {
	_, key, dup := checkIntervals(ops)
	return key, dup
}

func checkIntervals(ops []Op) (*writeSet, string, bool) {
	s := newWriteSet()
	for i := range ops {
		if op := &ops[i]; op.Type == OpDelete && !op.nests() {
			if op.Prefix {
				s.prefixes[op.Key] = true
			} else {
				s.deleted[op.Key] = true
			}
		}
	}
	for i := range ops {
		op := &ops[i]
		if !op.nests() {
			continue
		}
		then, key, dup := checkIntervals(op.Txn.Then)
		if dup {
			return nil, key, true
		}
		els, key, dup := checkIntervals(op.Txn.Else)
		if dup {
			return nil, key, true
		}
		for _, k := range then.puts {
			if s.put[k] || s.deletes(k) {
				return nil, k, true
			}
			s.addPut(k)
		}
		for _, k := range els.puts {
			if s.put[k] && !then.put[k] || s.deletes(k) {
				return nil, k, true
			}
			if !s.put[k] {
				s.addPut(k)
			}
		}
		s.addDeletes(then)
		s.addDeletes(els)
	}
	for i := range ops {
		if op := &ops[i]; op.Type == OpPut {
			if s.put[op.Key] || s.deletes(op.Key) {
				return nil, op.Key, true
			}
			s.addPut(op.Key)
		}
	}
	return s, "", false
}
