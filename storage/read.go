package storage

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
)

// Reads cost what they say. Every read that can find many keys (a List,
// a transaction's gets) is bounded in command.ReadCost units and walks the
// live keys from where it starts, copying only what it returns: a read
// over its bound stops there and fails, having materialised at most its
// bound, never the whole prefix.

// ErrReadTooLarge is returned by a read that would pass its bound.
var ErrReadTooLarge = errs.ReadTooLarge

// ErrApplyBudget is returned by ApplyWithin when the entries' reads went
// past its budget: nothing of the call was applied, and the caller applies
// them again without a budget, off the goroutine that must not be held up.
var ErrApplyBudget = errors.New("storage: apply read budget spent")

// Page bounds one read of the keys under a prefix.
type Page struct {
	// After, when not empty, starts the page strictly after this key.
	After string
	// Limit, when positive, is the most keys the page holds.
	Limit int
	// MaxBytes, when positive, bounds the page in command.ReadCost units:
	// a page that would hold more fails with ErrReadTooLarge.
	MaxBytes int64
}

// ListPage returns the keys under prefix that p admits, in key order, and
// the revision the read saw. It copies only the keys it returns. The
// caller owns the values.
func (sm *StateMachine) ListPage(prefix string, p Page) ([]command.KV, int64, error) {
	if err := sm.enter(); err != nil {
		return nil, 0, err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	var (
		kvs   []command.KV
		arena valueArena
		cost  int64
	)
	var over error
	v.ascendFrom(prefix, p.After, func(it kvItem) bool {
		if p.Limit > 0 && len(kvs) >= p.Limit {
			return false
		}
		cost += command.ReadCost(it.key, it.kv.Value)
		if p.MaxBytes > 0 && cost > p.MaxBytes {
			over = tooLarge(p.MaxBytes, len(kvs))
			return false
		}
		kv := *it.kv
		kv.Value = arena.copy(kv.Value)
		kvs = append(kvs, kv)
		return true
	})
	if over != nil {
		return nil, 0, over
	}
	return kvs, v.rev, nil
}

// tooLarge is the error of a read that passed maxBytes after n keys.
func tooLarge(maxBytes int64, n int) error {
	return fmt.Errorf("%w: more than %d bytes (keys and values, %d more per key) after %d keys",
		ErrReadTooLarge, maxBytes, command.ReadCostOverhead, n)
}

// ascendFrom calls fn for every key of s under prefix and strictly after
// after, in key order, until fn returns false.
func (s memState) ascendFrom(prefix, after string, fn func(kvItem) bool) {
	start := prefix
	if after >= prefix {
		// The least key greater than after.
		start = after + "\x00"
	}
	s.keys.AscendGreaterOrEqual(kvItem{key: start}, func(it kvItem) bool {
		if !strings.HasPrefix(it.key, prefix) {
			return false
		}
		return fn(it)
	})
}

// ReadTxn evaluates t, which must write nothing (command.Txn.ReadOnly),
// against the applied state at one revision, as applying it would, and
// returns its result without the log. Its gets may read at most maxBytes
// in command.ReadCost units (0: no bound), else ErrReadTooLarge; a read
// over the bound stops there.
func (sm *StateMachine) ReadTxn(t *command.Txn, maxBytes int64) (command.Result, error) {
	switch {
	case !t.ReadOnly():
		return command.Result{}, fmt.Errorf("%w: ReadTxn of a transaction that writes", errs.InvalidArgument)
	case !validTxn(t):
		return command.Result{}, fmt.Errorf("%w: a compare or an operation of unknown kind", errs.InvalidArgument)
	}
	if err := sm.enter(); err != nil {
		return command.Result{}, err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	ok, ops, plan := branch(v.memState, t)
	res := command.Result{Rev: v.rev, Succeeded: ok, Ops: make([]command.OpResult, len(ops))}
	var (
		arena valueArena
		cost  int64
		n     int
	)
	for i := range ops {
		op := &ops[i]
		var over bool
		add := func(it kvItem) bool {
			cost += command.ReadCost(it.key, it.kv.Value)
			if maxBytes > 0 && cost > maxBytes {
				over = true
				return false
			}
			kv := *it.kv
			kv.Value = arena.copy(kv.Value)
			res.Ops[i].KVs = append(res.Ops[i].KVs, kv)
			n++
			return true
		}
		if op.Prefix {
			v.ascendPrefix(op.Key, add)
		} else if it, found := v.keys.Get(kvItem{key: op.Key}); found {
			add(it)
		}
		if over {
			return command.Result{}, tooLarge(maxBytes, n)
		}
	}
	res.Ops = plan.Nest(res.Ops)
	return res, nil
}

// CheckTxnReads is the proposer's check of a transaction with a read
// limit, before it proposes it: the gets of the branch the applied state
// would run, counted as the state machine will count them, must fit in
// t.ReadLimit, else ErrReadTooLarge. The state may change before the
// entry applies; the state machine's own count then decides.
func (sm *StateMachine) CheckTxnReads(t *command.Txn) error {
	if t.ReadLimit <= 0 {
		return nil
	}
	if err := sm.enter(); err != nil {
		return err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	_, ops, _ := branch(v.memState, t)
	if cost := branchReadCost(v.memState, ops, t.ReadLimit); cost > t.ReadLimit {
		return fmt.Errorf("%w: the transaction's gets would read more than %d bytes (keys and values, %d more per key)",
			ErrReadTooLarge, t.ReadLimit, command.ReadCostOverhead)
	}
	return nil
}

// branch evaluates t's compares against s, and those of the
// transactions it nests on the path taken, and returns which branch runs,
// its ops flat and the plan that shapes their results (command.Plan).
func branch(s memState, t *command.Txn) (bool, []command.Op, *command.Plan) {
	return t.Plan(func(c *command.Compare) bool {
		var kv command.KV
		if it, found := s.keys.Get(kvItem{key: c.Key}); found {
			kv = *it.kv
		}
		return compare(&kv, c)
	})
}

// branchReadCost counts what the gets of ops would read, by the rule of
// command.Txn.ReadLimit (part of format 6's meaning, so every member
// counts alike): each get counts the keys it finds in s, the state
// before the transaction, and every key ops put that it would match, as
// if ops' deletes had not happened. It stops counting once past stop, so
// its cost is bounded by stop and the ops, whatever s holds.
func branchReadCost(s memState, ops []command.Op, stop int64) int64 {
	var small [8]putCost
	pc := putCosts{puts: small[:0]}
	for i := range ops {
		if op := &ops[i]; op.Type == command.OpPut {
			pc.puts = append(pc.puts, putCost{op.Key, command.ReadCost(op.Key, op.Value)})
		}
	}
	pc.index()
	var total int64
	for i := range ops {
		op := &ops[i]
		if op.Type != command.OpGet {
			continue
		}
		if op.Prefix {
			s.ascendPrefix(op.Key, func(it kvItem) bool {
				total += command.ReadCost(it.key, it.kv.Value)
				return total <= stop
			})
		} else if it, found := s.keys.Get(kvItem{key: op.Key}); found {
			total += command.ReadCost(it.key, it.kv.Value)
		}
		total += pc.matching(op.Key, op.Prefix)
		if total > stop {
			return total
		}
	}
	return total
}

type putCost struct {
	key  string
	cost int64
}

// putCosts answers what the puts of a branch add to a get: for a few
// puts by a scan, for many from the puts sorted by key with running
// sums, so a branch costs O(n log n) whatever its shape.
type putCosts struct {
	puts []putCost
	cum  []int64 // cum[i] is the cost of puts[:i], once sorted; nil for a few
}

// smallPuts is how many puts matching scans rather than searches.
const smallPuts = 8

func (pc *putCosts) index() {
	if len(pc.puts) <= smallPuts {
		return
	}
	slices.SortFunc(pc.puts, func(a, b putCost) int { return strings.Compare(a.key, b.key) })
	pc.cum = make([]int64, len(pc.puts)+1)
	for i, p := range pc.puts {
		pc.cum[i+1] = pc.cum[i] + p.cost
	}
}

// matching is the cost of the puts a get of key (a prefix, or one key)
// would find.
func (pc *putCosts) matching(key string, prefix bool) int64 {
	if pc.cum == nil {
		var n int64
		for _, p := range pc.puts {
			if p.key == key || prefix && strings.HasPrefix(p.key, key) {
				n += p.cost
			}
		}
		return n
	}
	find := func(k string) int {
		i, _ := slices.BinarySearchFunc(pc.puts, k, func(p putCost, k string) int { return strings.Compare(p.key, k) })
		return i
	}
	lo, hi := find(key), len(pc.puts)
	switch {
	case !prefix:
		hi = lo
		for hi < len(pc.puts) && pc.puts[hi].key == key {
			hi++
		}
	default:
		// The puts under the prefix are a contiguous run of the sorted
		// ones, up to the first key past every key under it.
		if end := prefixEnd([]byte(key)); end != nil {
			hi = find(string(end))
		}
	}
	return pc.cum[hi] - pc.cum[lo]
}
