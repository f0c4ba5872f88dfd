package storage

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/wirebytes"
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

// Record formats of the table.
const (
	proposerFormat1 byte = 1 // floor, last active index
	resultFormat1   byte = 1 // one command's result
	horizonFormat1  byte = 1 // the retirement horizon
)

// Second bytes of the table's keys, after prefixProposer.
const (
	tagHorizon  = 'h'
	tagProposer = 'p'
	tagResult   = 'r'
	refByID     = 'i'
	refByKey    = 'k'
)

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

// proposerItem is one proposer's bookkeeping.
type proposerItem struct {
	proposerRef
	floor uint64 // results below are forgotten; commands below unknown ones refused
	last  uint64 // the index it was last active at
	// results and bytes count what it keeps (not persisted: rebuilt).
	results int
	bytes   int64
}

// resultItem is one kept result. res is never changed once in a tree.
type resultItem struct {
	proposerRef
	seq  uint64
	res  *command.Result
	size int64
}

func proposerLess(a, b proposerItem) bool { return compareRefs(a.proposerRef, b.proposerRef) < 0 }

func resultLess(a, b resultItem) bool {
	if c := compareRefs(a.proposerRef, b.proposerRef); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

// proposerTable is memState's part for the table.
type proposerTable struct {
	proposers *btree.BTreeG[proposerItem]
	results   *btree.BTreeG[resultItem]
	horizon   uint64
	bytes     int64 // Σ result sizes
}

func newProposerTable() proposerTable {
	return proposerTable{
		proposers: btree.NewG(btreeDegree, proposerLess),
		results:   btree.NewG(btreeDegree, resultLess),
	}
}

func (t proposerTable) clone() proposerTable {
	t.proposers, t.results = t.proposers.Clone(), t.results.Clone()
	return t
}

// Keys.

func appendRefBody(dst []byte, r proposerRef) []byte {
	dst = wirebytes.AppendString(dst, r.owner)
	if r.key != "" {
		return wirebytes.AppendString(append(dst, refByKey), r.key)
	}
	return appendUint64(append(dst, refByID), r.id)
}

func appendProposerKey(dst []byte, r proposerRef) []byte {
	return appendRefBody(append(dst, prefixProposer, tagProposer), r)
}

func appendResultKey(dst []byte, r proposerRef, seq uint64) []byte {
	return appendUint64(appendRefBody(append(dst, prefixProposer, tagResult), r), seq)
}

var horizonKey = []byte{prefixProposer, tagHorizon}

// readRefBody parses what appendRefBody wrote, leaving r at the rest.
func readRefBody(r *wirebytes.Reader) proposerRef {
	var ref proposerRef
	ref.owner = r.Str()
	switch tag := r.U8(); tag {
	case refByKey:
		if ref.key = r.Str(); ref.key == "" {
			r.Fail("empty idempotency key")
		}
	case refByID:
		b := r.Take(8)
		if len(b) == 8 {
			ref.id = readUint64(b)
		}
	default:
		r.Fail("proposer tag %#x", tag)
	}
	return ref
}

// Records.

func appendProposerRecord(dst []byte, it *proposerItem) []byte {
	dst = append(dst, proposerFormat1)
	dst = binary.AppendUvarint(dst, it.floor)
	return binary.AppendUvarint(dst, it.last)
}

func appendHorizonRecord(dst []byte, h uint64) []byte {
	return binary.AppendUvarint(append(dst, horizonFormat1), h)
}

// Result record flags.
const (
	resultSucceeded = 1 << 0
	resultTrimmed   = 1 << 1
)

// appendResultRecord appends the stored form of res.
func appendResultRecord(dst []byte, res *command.Result) []byte {
	dst = append(dst, resultFormat1, byte(res.Status))
	var flags byte
	if res.Succeeded {
		flags |= resultSucceeded
	}
	if res.Trimmed {
		flags |= resultTrimmed
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, res.Rev)
	dst = binary.AppendVarint(dst, res.SessionID)
	dst = binary.AppendUvarint(dst, uint64(len(res.Ops)))
	for i := range res.Ops {
		op := &res.Ops[i]
		dst = binary.AppendVarint(dst, op.Deleted)
		dst = binary.AppendUvarint(dst, uint64(len(op.KVs)))
		for j := range op.KVs {
			kv := &op.KVs[j]
			dst = wirebytes.AppendString(dst, kv.Key)
			dst = wirebytes.AppendBytes(dst, kv.Value)
			dst = binary.AppendVarint(dst, kv.Version)
			dst = binary.AppendVarint(dst, kv.CreateRev)
			dst = binary.AppendVarint(dst, kv.ModRev)
			dst = binary.AppendVarint(dst, kv.Session)
		}
	}
	return dst
}

// The fewest bytes an op result and a KV take in a result record.
const minOpResult, minResultKV = 2, 6

func decodeResultRecord(b []byte) (*command.Result, error) {
	r, err := newRecord(b, resultFormat1, "result")
	if err != nil {
		return nil, err
	}
	res := &command.Result{Status: command.Status(r.U8())}
	flags := r.U8()
	if flags&^(resultSucceeded|resultTrimmed) != 0 {
		r.Fail("result flags %#x", flags)
	}
	res.Succeeded, res.Trimmed = flags&resultSucceeded != 0, flags&resultTrimmed != 0
	res.Rev = r.Varint()
	res.SessionID = r.Varint()
	if n := r.Count(minOpResult); n > 0 {
		res.Ops = make([]command.OpResult, n)
		for i := range res.Ops {
			op := &res.Ops[i]
			op.Deleted = r.Varint()
			if k := r.Count(minResultKV); k > 0 {
				op.KVs = make([]command.KV, k)
				for j := range op.KVs {
					kv := &op.KVs[j]
					kv.Key = r.Str()
					kv.Value = r.Bytes()
					kv.Version = r.Varint()
					kv.CreateRev = r.Varint()
					kv.ModRev = r.Varint()
					kv.Session = r.Varint()
				}
			}
		}
	}
	if err := recordDone(&r, "result"); err != nil {
		return nil, err
	}
	return res, nil
}

// addProposerRecord loads one stored record of the table into t.
func (t *proposerTable) add(k, val []byte) error {
	if len(k) < 2 || k[0] != prefixProposer {
		return fmt.Errorf("%w: proposer table key %x", ErrCorrupt, k)
	}
	kr := wirebytes.NewReader(k[2:], ErrCorrupt)
	switch k[1] {
	case tagHorizon:
		if len(k) != 2 {
			return fmt.Errorf("%w: horizon key %x", ErrCorrupt, k)
		}
		r, err := newRecord(val, horizonFormat1, "horizon")
		if err != nil {
			return err
		}
		t.horizon = r.Uvarint()
		return recordDone(&r, "horizon")
	case tagProposer:
		ref := readRefBody(&kr)
		if err := kr.Done(); err != nil {
			return fmt.Errorf("proposer key: %w", err)
		}
		r, err := newRecord(val, proposerFormat1, "proposer")
		if err != nil {
			return err
		}
		it := proposerItem{proposerRef: ref, floor: r.Uvarint(), last: r.Uvarint()}
		if err := recordDone(&r, "proposer"); err != nil {
			return err
		}
		// Its results may have been loaded first: they sort after.
		if old, ok := t.proposers.Get(it); ok {
			it.results, it.bytes = old.results, old.bytes
		}
		t.proposers.ReplaceOrInsert(it)
	case tagResult:
		ref := readRefBody(&kr)
		seqb := kr.Take(8)
		if err := kr.Done(); err != nil || len(seqb) != 8 {
			return fmt.Errorf("%w: result key %x", ErrCorrupt, k)
		}
		res, err := decodeResultRecord(val)
		if err != nil {
			return err
		}
		ri := resultItem{proposerRef: ref, seq: readUint64(seqb), res: res, size: int64(len(val))}
		t.results.ReplaceOrInsert(ri)
		t.bytes += ri.size
		p, _ := t.proposers.Get(proposerItem{proposerRef: ref})
		p.proposerRef = ref
		p.results++
		p.bytes += ri.size
		t.proposers.ReplaceOrInsert(p)
	default:
		return fmt.Errorf("%w: proposer table key %x", ErrCorrupt, k)
	}
	return nil
}

// The applier's side.

// proposerCheck decides what a command with a proposer does before it
// runs: repeat a kept result (repeat non-nil), be refused (status set),
// or run (neither).
func (a *applier) proposerCheck(p *command.Proposer) (repeat *command.Result, refused command.Status, run bool) {
	t := &a.mem.props
	ref := refOf(p)
	it, known := t.proposers.Get(proposerItem{proposerRef: ref})
	if known {
		if r, ok := t.results.Get(resultItem{proposerRef: ref, seq: seqOf(p)}); ok {
			return r.res, 0, false
		}
		if p.Key == "" && p.Seq < it.floor {
			return nil, command.StatusRetired, false
		}
		return nil, 0, true
	}
	// A keyed proposer has no birth to go by: a key unknown here is new
	// (its record lasts as long as its owner keeps writing; see the
	// bounds above).
	if p.Key == "" && p.Born < t.horizon {
		return nil, command.StatusRetired, false
	}
	return nil, 0, true
}

// repeatResult is the result a copy of an applied command gets: the kept
// one, marked Repeat, with the values of its puts (which the table does
// not keep: the copy carries them) filled in from cmd.
func repeatResult(kept *command.Result, cmd *command.Command) command.Result {
	res := *kept
	res.Repeat = true
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

// recordResult keeps res as the result of cmd's proposer p, applied at
// index idx, and moves the proposer's floor and last activity.
func (a *applier) recordResult(idx uint64, p *command.Proposer, cmd *command.Command, res *command.Result) error {
	t := &a.mem.props
	ref := refOf(p)
	it, _ := t.proposers.Get(proposerItem{proposerRef: ref})
	it.proposerRef = ref
	it.last = idx
	if p.Key == "" && p.Floor > it.floor {
		if err := a.forgetResults(&it, p.Floor); err != nil {
			return err
		}
		it.floor = p.Floor
	}
	kept := a.keptResult(res, cmd)
	a.vbuf = appendResultRecord(a.vbuf[:0], kept)
	ri := resultItem{proposerRef: ref, seq: seqOf(p), res: kept, size: int64(len(a.vbuf))}
	a.ibuf = appendResultKey(a.ibuf[:0], ref, ri.seq)
	if err := a.b.Set(a.ibuf, a.vbuf, nil); err != nil {
		return err
	}
	if old, had := t.results.ReplaceOrInsert(ri); had {
		it.results--
		it.bytes -= old.size
		t.bytes -= old.size
	}
	it.results++
	it.bytes += ri.size
	t.bytes += ri.size
	if it.results > a.sm.opts.MaxResultsPerProposer {
		// The oldest go, and the floor rises past them: a copy of one of
		// them that arrives later is refused, never applied again.
		var oldest uint64
		t.results.AscendGreaterOrEqual(resultItem{proposerRef: ref}, func(r resultItem) bool {
			oldest = r.seq
			return false
		})
		if err := a.forgetResults(&it, oldest+1); err != nil {
			return err
		}
		it.floor = max(it.floor, oldest+1)
	}
	return a.putProposer(&it)
}

func (a *applier) putProposer(it *proposerItem) error {
	a.ibuf = appendProposerKey(a.ibuf[:0], it.proposerRef)
	a.vbuf = appendProposerRecord(a.vbuf[:0], it)
	if err := a.b.Set(a.ibuf, a.vbuf, nil); err != nil {
		return err
	}
	a.mem.props.proposers.ReplaceOrInsert(*it)
	return nil
}

// forgetResults drops it's results below seq.
func (a *applier) forgetResults(it *proposerItem, below uint64) error {
	t := &a.mem.props
	gone := a.gone[:0]
	t.results.AscendRange(resultItem{proposerRef: it.proposerRef}, resultItem{proposerRef: it.proposerRef, seq: below},
		func(r resultItem) bool {
			gone = append(gone, r)
			return true
		})
	a.gone = gone
	defer clear(gone) // the results they point to may go
	for _, r := range gone {
		if err := a.dropResult(r); err != nil {
			return err
		}
		it.results--
		it.bytes -= r.size
	}
	return nil
}

func (a *applier) dropResult(r resultItem) error {
	a.ibuf = appendResultKey(a.ibuf[:0], r.proposerRef, r.seq)
	if err := a.b.Delete(a.ibuf, nil); err != nil {
		return err
	}
	a.mem.props.results.Delete(r)
	a.mem.props.bytes -= r.size
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
	kept, refused, _ := a.proposerCheck(p)
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
	if err := a.recordResult(idx, p, &command.Command{Kind: command.KindNoop}, &res); err != nil {
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
		if err := a.forgetResults(it, ^uint64(0)); err != nil {
			return err
		}
		// forgetResults goes below its bound: the highest number, which a
		// command may carry too, goes on its own.
		if r, ok := t.results.Get(resultItem{proposerRef: it.proposerRef, seq: ^uint64(0)}); ok {
			if err := a.dropResult(r); err != nil {
				return err
			}
		}
		a.ibuf = appendProposerKey(a.ibuf[:0], it.proposerRef)
		if err := a.b.Delete(a.ibuf, nil); err != nil {
			return err
		}
		t.proposers.Delete(*it)
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
	return ProposerStats{Proposers: t.proposers.Len(), Results: t.results.Len(), Bytes: t.bytes, Horizon: t.horizon}
}

// ProposerResult returns the result kept for p's command as of the
// published state, if any: a read, for a caller asking after an outcome
// without settling it.
func (sm *StateMachine) ProposerResult(p *command.Proposer) (command.Result, bool) {
	t := sm.view.Load().props
	r, ok := t.results.Get(resultItem{proposerRef: refOf(p), seq: seqOf(p)})
	if !ok {
		return command.Result{}, false
	}
	return *r.res, true
}
