package storage

import (
	"cmp"
	"slices"

	"github.com/coordcell/coord/internal/command"
	"github.com/google/btree"
)

// The proposer table makes commands exactly-once (ARCHITECTURE.md,
// "Exactly-once writes"; the Raft dissertation, section 6.3). A command
// that names its proposer (command.Proposer) is applied only the first
// time one of its copies reaches the log; every later copy (a forward
// re-sent because it may have been dropped, a retry through another
// member or to a new leader) changes nothing and gets the first copy's
// result, which the table keeps. Everything here is replicated state:
// it is decided from the entries alone, so every member holds the same
// table at the same applied index, and it travels in snapshots and
// backups with the keys.
//
// What bounds it, all counted in replicated quantities, never clocks:
//   - a proposer says, with each command, below which sequence number it
//     needs no result any more (Floor); those are forgotten;
//   - a proposer keeps at most MaxResultsPerProposer results (the oldest
//     go first, raising its floor);
//   - a proposer that proposed nothing for ProposerRetainEntries log
//     entries is retired, and so are the least recently active ones
//     while an owner has more than MaxProposersPerOwner or the cell more
//     than MaxProposers; this is checked every retireEvery entries.
//
// A retired record leaves the horizon behind: the last index any retired
// proposer was active at. A command of a proposer the table does not know
// whose call began (Born) before the horizon may belong to a retired one,
// so it is refused (StatusRetired) rather than perhaps applied twice.

// Defaults of the proposer table's bounds.
const (
	DefaultProposerRetainEntries = 1_000_000
	DefaultMaxProposers          = 65_536
	DefaultMaxProposersPerOwner  = 4_096
	DefaultMaxResultsPerProposer = 4_096
	DefaultMaxResultBytes        = 16 << 10
	DefaultMaxProposerBytes      = 64 << 20
)

// retireEvery is how often, in log entries, idle and surplus proposers
// are retired. A multiple of the index, so every member retires at the
// same entries however its batches fell.
const retireEvery = 1024

// proposerRef names one proposer: by owner and ID, or by owner and a
// caller's idempotency key (key != "").
type proposerRef struct {
	owner string
	key   string
	id    uint64
}

func refOf(p *command.Proposer) proposerRef {
	if p.Key != "" {
		return proposerRef{owner: p.Owner, key: p.Key}
	}
	return proposerRef{owner: p.Owner, id: p.ID}
}

// seqOf is the sequence number a command's result is kept under: a
// keyed proposer has one result, at 0.
func seqOf(p *command.Proposer) uint64 {
	if p.Key != "" {
		return 0
	}
	return p.Seq
}

func compareRefs(a, b proposerRef) int {
	if c := cmp.Compare(a.owner, b.owner); c != 0 {
		return c
	}
	if c := cmp.Compare(a.key, b.key); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// proposerItem is one proposer's bookkeeping, and its kept results.
type proposerItem struct {
	proposerRef
	floor uint64 // results below are forgotten; commands below unknown ones refused
	last  uint64 // the index it was last active at
	// results are its kept results, in sequence order. Published views
	// share the array: only the Apply that made it (gen) writes into it;
	// any other copies it first (applier.ownResults).
	results []resultItem
	gen     uint64
	bytes   int64 // Σ results' sizes (not persisted: rebuilt)
	// stored is set while a proposer record of it may exist (tagProposer),
	// which its retirement deletes.
	stored bool
}

// resultItem is one kept result. res is never changed once kept.
type resultItem struct {
	seq  uint64
	res  *command.Result
	size uint32 // resultSize(res)
	// explicit is set when its record is deleted as it is forgotten
	// rather than implied by the floor (proposers_records.go).
	explicit bool
}

func proposerLess(a, b proposerItem) bool { return compareRefs(a.proposerRef, b.proposerRef) < 0 }

// find returns the index of it's result seq, or where it would go.
func (it *proposerItem) find(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(it.results, seq, func(r resultItem, seq uint64) int { return cmp.Compare(r.seq, seq) })
}

// result returns it's kept result of seq, or nil.
func (it *proposerItem) result(seq uint64) *command.Result {
	if i, ok := it.find(seq); ok {
		return it.results[i].res
	}
	return nil
}

// proposerTable is memState's part for the table.
type proposerTable struct {
	proposers *btree.BTreeG[proposerItem]
	horizon   uint64
	bytes     int64 // Σ result sizes
	results   int   // how many results are kept
	// unsettled is set while a load has added results settle has not
	// looked at.
	unsettled bool
}

func newProposerTable() proposerTable {
	return proposerTable{proposers: btree.NewG(btreeDegree, proposerLess)}
}

func (t proposerTable) clone() proposerTable {
	t.proposers = t.proposers.Clone()
	return t
}

// The applier's side.

// proposerCheck decides what a command with a proposer does before it
// runs: repeat a kept result (repeat non-nil), be refused (status set),
// or run (neither). it is the proposer's bookkeeping for recordResult
// (its ref alone when the table does not know it).
func (a *applier) proposerCheck(p *command.Proposer) (it proposerItem, repeat *command.Result, refused command.Status, run bool) {
	t := &a.mem.props
	ref := refOf(p)
	it, known := t.proposers.Get(proposerItem{proposerRef: ref})
	if known {
		if r := it.result(seqOf(p)); r != nil {
			return it, r, 0, false
		}
		if p.Key == "" && p.Seq < it.floor {
			return it, nil, command.StatusRetired, false
		}
		return it, nil, 0, true
	}
	it.proposerRef = ref
	// A keyed proposer has no birth to go by: a key unknown here is new
	// (its record lasts as long as its owner keeps writing; see the
	// bounds above).
	if p.Key == "" && p.Born < t.horizon {
		return it, nil, command.StatusRetired, false
	}
	return it, nil, 0, true
}

// repeatResult is the result a copy of an applied command gets: the kept
// one, marked Repeat, with the values of its puts (which the table does
// not keep: the copy carries them) filled in from cmd.
func repeatResult(kept *command.Result, cmd *command.Command) command.Result {
	res := *kept
	res.Repeat = true
	if t := cmd.Txn; t != nil && t.Nests() {
		branch := t.Then
		if !res.Succeeded {
			branch = t.Else
		}
		res.Ops = cloneOpResults(res.Ops)
		command.Ran(branch, res.Ops, func(op *command.Op, r *command.OpResult) {
			if op.Type == command.OpPut && len(r.KVs) == 1 {
				r.KVs[0].Value = op.Value
			}
		})
		return res
	}
	if t := cmd.Txn; t != nil && len(res.Ops) > 0 {
		ops := t.Then
		if !res.Succeeded {
			ops = t.Else
		}
		res.Ops = slices.Clone(res.Ops)
		for i := range res.Ops {
			if i < len(ops) && ops[i].Type == command.OpPut && len(res.Ops[i].KVs) == 1 {
				kv := res.Ops[i].KVs[0]
				kv.Value = ops[i].Value
				res.Ops[i].KVs = []command.KV{kv}
			}
		}
	}
	return res
}

// keptResult is what the table keeps of res: the put values dropped (a
// copy carries them), and the reads too when the whole outgrows
// MaxResultBytes. A one-op result, every put's and delete's, takes one
// allocation.
func (a *applier) keptResult(res *command.Result, cmd *command.Command) *command.Result {
	t := cmd.Txn
	if t == nil || len(res.Ops) == 0 {
		kept := *res
		kept.Repeat = false
		return &kept
	}
	ops := t.Then
	if !res.Succeeded {
		ops = t.Else
	}
	if t.Nests() {
		return a.keptNested(res, ops)
	}
	isPut := func(i int) bool { return i < len(ops) && ops[i].Type == command.OpPut }
	var kept *command.Result
	if len(res.Ops) == 1 && len(res.Ops[0].KVs) <= 1 {
		one := new(struct {
			res command.Result
			op  [1]command.OpResult
			kv  [1]command.KV
		})
		one.res, one.op[0] = *res, res.Ops[0]
		one.res.Ops = one.op[:]
		if len(res.Ops[0].KVs) == 1 {
			one.kv[0] = res.Ops[0].KVs[0]
			one.op[0].KVs = one.kv[:]
		}
		kept = &one.res
	} else {
		k := *res
		k.Ops = make([]command.OpResult, len(res.Ops))
		for i := range res.Ops {
			k.Ops[i].Deleted = res.Ops[i].Deleted
			kvs := res.Ops[i].KVs
			if isPut(i) {
				kvs = slices.Clone(kvs)
			}
			k.Ops[i].KVs = kvs
		}
		kept = &k
	}
	kept.Repeat = false
	size := 0
	for i := range kept.Ops {
		kvs := kept.Ops[i].KVs
		for j := range kvs {
			if isPut(i) {
				kvs[j].Value = nil
			}
			size += len(kvs[j].Key) + len(kvs[j].Value) + 40
		}
	}
	if size > a.sm.opts.MaxResultBytes {
		kept.Trimmed = true
		for i := range kept.Ops {
			if !isPut(i) {
				kept.Ops[i].KVs = nil
			}
		}
	}
	return kept
}

// keptNested is keptResult for a transaction that nests others, whose
// branch that ran is ops: the same rules, applied to every op at every
// depth.
func (a *applier) keptNested(res *command.Result, ops []command.Op) *command.Result {
	kept := *res
	kept.Repeat = false
	kept.Ops = cloneOpResults(res.Ops)
	size := 0
	command.Ran(ops, kept.Ops, func(op *command.Op, r *command.OpResult) {
		for j := range r.KVs {
			if op.Type == command.OpPut {
				r.KVs[j].Value = nil
			}
			size += len(r.KVs[j].Key) + len(r.KVs[j].Value) + 40
		}
	})
	if size > a.sm.opts.MaxResultBytes {
		kept.Trimmed = true
		command.Ran(ops, kept.Ops, func(op *command.Op, r *command.OpResult) {
			if op.Type != command.OpPut {
				r.KVs = nil
			}
		})
	}
	return &kept
}

// cloneOpResults deep-copies ops, nested results and KV slices included
// (the values are shared: nobody writes to them).
func cloneOpResults(ops []command.OpResult) []command.OpResult {
	if ops == nil {
		return nil
	}
	out := slices.Clone(ops)
	for i := range out {
		out[i].KVs = slices.Clone(out[i].KVs)
		if n := out[i].Txn; n != nil {
			out[i].Txn = &command.TxnResult{Succeeded: n.Succeeded, Ops: cloneOpResults(n.Ops)}
		}
	}
	return out
}

// recordResult keeps res as the result of cmd's proposer p, applied at
// index idx, and moves the proposer's floor and last activity; it is the
// proposer as proposerCheck found it. It writes one record: the
// result's, which says the proposer's floor and last index too (or,
// should the result go at once, the proposer's).
func (a *applier) recordResult(idx uint64, p *command.Proposer, it proposerItem, cmd *command.Command, res *command.Result) error {
	t := &a.mem.props
	a.ownResults(&it)
	it.last = idx
	from := it.floor
	if p.Key == "" && p.Floor > it.floor {
		if err := a.forgetResults(&it, p.Floor); err != nil {
			return err
		}
		it.floor = p.Floor
	}
	kept := a.keptResult(res, cmd)
	seq := seqOf(p)
	// A result below the floor (its command's floor passed its own
	// sequence) is kept like any other, but the floor cannot imply when
	// it goes.
	ri := resultItem{seq: seq, res: kept, size: uint32(resultSize(kept)), explicit: seq < it.floor}
	switch i, had := it.find(seq); {
	case had: // not reached: a kept result is repeated, not run again
		it.bytes -= int64(it.results[i].size)
		t.bytes -= int64(it.results[i].size)
		t.results--
		it.results[i] = ri
	default:
		it.results = slices.Insert(it.results, i, ri)
	}
	it.bytes += int64(ri.size)
	t.bytes += int64(ri.size)
	t.results++
	went := false // ri itself, the oldest
	if len(it.results) > a.sm.opts.MaxResultsPerProposer {
		// The oldest go, and the floor rises past them: a copy of one of
		// them that arrives later is refused, never applied again.
		oldest := it.results[0].seq
		if err := a.forgetResults(&it, oldest+1); err != nil {
			return err
		}
		it.floor = max(it.floor, oldest+1)
		went = oldest == seq
	}
	if went {
		// It went at once: the proposer's record says its floor and index.
		if err := a.putProposer(&it); err != nil {
			return err
		}
	} else {
		a.vbuf = appendResultRecord(a.vbuf[:0], kept, seq, resultMeta{floor: it.floor, last: it.last, explicit: ri.explicit})
		a.ibuf = appendResultKey(a.ibuf[:0], it.proposerRef, seq)
		if err := a.b.Set(a.ibuf, a.vbuf, nil); err != nil {
			return err
		}
	}
	if err := a.pruneResults(&it, from); err != nil {
		return err
	}
	t.proposers.ReplaceOrInsert(it)
	return nil
}

// ownResults makes it's results an array this Apply may write into: the
// one it made, or a copy of a published one, with room to grow.
func (a *applier) ownResults(it *proposerItem) {
	if it.gen == a.gen {
		return
	}
	it.gen = a.gen
	it.results = append(make([]resultItem, 0, len(it.results)+min(len(it.results), 64)+2), it.results...)
}

// pruneResults deletes the records of it's forgotten results in one range
// once its floor has passed a floorChunk bound since from (its floor
// before this command): every record below the bound, up to its lowest
// kept result, which may be an explicit one below the floor. The newest
// record is never among them: it is kept, or the proposer's record
// stands for it.
func (a *applier) pruneResults(it *proposerItem, from uint64) error {
	end := it.floor / floorChunk * floorChunk
	if it.key != "" || end <= from/floorChunk*floorChunk {
		return nil
	}
	if len(it.results) > 0 {
		end = min(end, it.results[0].seq)
	}
	if end == 0 {
		return nil
	}
	a.ibuf = appendResultKey(a.ibuf[:0], it.proposerRef, 0)
	a.ebuf = appendResultKey(a.ebuf[:0], it.proposerRef, end)
	return a.b.DeleteRange(a.ibuf, a.ebuf, nil)
}

func (a *applier) putProposer(it *proposerItem) error {
	a.ibuf = appendProposerKey(a.ibuf[:0], it.proposerRef)
	a.vbuf = appendProposerRecord(a.vbuf[:0], it)
	it.stored = true
	return a.b.Set(a.ibuf, a.vbuf, nil)
}

// forgetResults drops it's results below seq (it's array is this
// Apply's). Their records stay, below the floor, for pruneResults, but
// for the explicit ones, which are deleted.
func (a *applier) forgetResults(it *proposerItem, below uint64) error {
	t := &a.mem.props
	n, _ := it.find(below)
	for i := range it.results[:n] {
		r := &it.results[i]
		if r.explicit {
			a.ibuf = appendResultKey(a.ibuf[:0], it.proposerRef, r.seq)
			if err := a.b.Delete(a.ibuf, nil); err != nil {
				return err
			}
		}
		t.bytes -= int64(r.size)
		it.bytes -= int64(r.size)
	}
	t.results -= n
	clear(it.results[:n]) // the results they point to may go
	it.results = it.results[n:]
	return nil
}

// resolve settles the outcome of p's command: its kept result if it
// applied; else it is recorded as never to apply (StatusNotApplied),
// which every later copy of it then gets.
func (a *applier) resolve(idx uint64, cmd *command.Command) (command.Result, error) {
	p := cmd.Proposer
	if p == nil {
		return a.status(command.StatusInvalid), nil
	}
	it, kept, refused, _ := a.proposerCheck(p)
	switch {
	case kept != nil:
		res := *kept
		res.Repeat = true
		return res, nil
	case refused != 0:
		return a.status(refused), nil
	}
	res := a.status(command.StatusNotApplied)
	// The resolve is not a copy of the command it settles: no put values
	// to keep, whatever its own body says.
	if err := a.recordResult(idx, p, it, &command.Command{Kind: command.KindNoop}, &res); err != nil {
		return command.Result{}, err
	}
	return res, nil
}

// retireProposers retires, at index idx (a multiple of retireEvery), the
// proposers idle for ProposerRetainEntries entries and then, least
// recently active first, those past an owner's or the cell's bound.
func (a *applier) retireProposers(idx uint64) error {
	t := &a.mem.props
	o := a.sm.opts
	var idle []proposerItem
	perOwner := make(map[string]int)
	all := make([]proposerItem, 0, t.proposers.Len())
	t.proposers.Ascend(func(it proposerItem) bool {
		if it.last+o.ProposerRetainEntries < idx {
			idle = append(idle, it)
		} else {
			all = append(all, it)
			perOwner[it.owner]++
		}
		return true
	})
	over := len(all) > o.MaxProposers || t.bytes > o.MaxProposerBytes
	for _, n := range perOwner {
		over = over || n > o.MaxProposersPerOwner
	}
	if over {
		slices.SortStableFunc(all, func(x, y proposerItem) int { return cmp.Compare(x.last, y.last) })
		left, bytes := len(all), t.bytes
		for _, it := range idle {
			bytes -= it.bytes
		}
		kept := all[:0]
		for _, it := range all {
			if left > o.MaxProposers || bytes > o.MaxProposerBytes || perOwner[it.owner] > o.MaxProposersPerOwner {
				idle = append(idle, it)
				left--
				bytes -= it.bytes
				perOwner[it.owner]--
				continue
			}
			kept = append(kept, it)
		}
	}
	if len(idle) == 0 {
		return nil
	}
	horizon := t.horizon
	for i := range idle {
		it := &idle[i]
		if err := a.retire(it); err != nil {
			return err
		}
		horizon = max(horizon, it.last)
	}
	if horizon != t.horizon {
		t.horizon = horizon
		a.vbuf = appendHorizonRecord(a.vbuf[:0], horizon)
		if err := a.b.Set(horizonKey, a.vbuf, nil); err != nil {
			return err
		}
	}
	return nil
}

// retire deletes it and every record of its results, kept or forgotten:
// one range, with the highest sequence number too.
func (a *applier) retire(it *proposerItem) error {
	t := &a.mem.props
	t.bytes -= it.bytes
	t.results -= len(it.results)
	a.ibuf = appendResultsKey(a.ibuf[:0], it.proposerRef)
	a.ebuf = append(a.ebuf[:0], a.ibuf...)
	if err := a.b.DeleteRange(a.ibuf, prefixEndInPlace(a.ebuf), nil); err != nil {
		return err
	}
	if it.stored {
		a.ibuf = appendProposerKey(a.ibuf[:0], it.proposerRef)
		if err := a.b.Delete(a.ibuf, nil); err != nil {
			return err
		}
	}
	t.proposers.Delete(*it)
	return nil
}

// prefixEndInPlace is prefixEnd written over p.
func prefixEndInPlace(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xff {
			p[i]++
			return p[:i+1]
		}
	}
	return nil
}

// ProposerStats is what the proposer table holds, for tests and metrics.
type ProposerStats struct {
	Proposers int
	Results   int
	Bytes     int64
	Horizon   uint64
}

// ProposerStats reports the table's size as of the published state.
func (sm *StateMachine) ProposerStats() ProposerStats {
	t := sm.view.Load().props
	return ProposerStats{Proposers: t.proposers.Len(), Results: t.results, Bytes: t.bytes, Horizon: t.horizon}
}

// ProposerResult returns the result kept for p's command as of the
// published state, if any: a read, for a caller asking after an outcome
// without settling it.
func (sm *StateMachine) ProposerResult(p *command.Proposer) (command.Result, bool) {
	t := sm.view.Load().props
	it, _ := t.proposers.Get(proposerItem{proposerRef: refOf(p)})
	r := it.result(seqOf(p))
	if r == nil {
		return command.Result{}, false
	}
	return *r, true
}
