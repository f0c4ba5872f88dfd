package storage

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
)

// Ranged reads: a key range, optionally as of a past revision, with
// etcd's Range options (keys only, count only, sort, revision filters).
// They keep ListPage's rule, reads cost what they say: every key the
// read walks costs command.ReadCost of its key (its value adds its bytes
// only if returned), and a read at a past revision also pays for every
// history record it decodes, its stored bytes plus the per-key overhead.
// So a read of a busy cell's distant past fails with ErrReadTooLarge,
// having decoded no more than its bound, rather than walk the whole
// retained history.

// ErrFutureRev is returned by a read at a revision above the state's.
var ErrFutureRev = errs.FutureRev

// CompactedError is a read at a revision older than the retained history
// can serve. It matches ErrCompacted with errors.Is.
type CompactedError struct {
	// Oldest is the oldest revision the history still holds: a read at
	// Oldest-1 or later can be served.
	Oldest int64
}

// Error says which revision is the oldest still available.
func (e *CompactedError) Error() string {
	return fmt.Sprintf("%v: the oldest revision still available is %d", ErrCompacted, e.Oldest)
}

// Is makes errors.Is(err, ErrCompacted) hold.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// SortTarget is what a ranged read sorts by.
type SortTarget uint8

// The sort targets, in etcd's order.
const (
	SortKey SortTarget = iota
	SortVersion
	SortCreateRev
	SortModRev
	SortValue
)

// RangeRead is one read of the keys in [Start, End).
type RangeRead struct {
	// Start and End bound the keys: [Start, End). End "\x00" means every
	// key from Start on (etcd's form); End <= Start reads nothing.
	Start, End string
	// After, when not empty, starts the read strictly after this key.
	After string
	// Limit, when positive, is the most keys returned.
	Limit int
	// MaxBytes, when positive, bounds the read (see the file's comment).
	MaxBytes int64
	// Rev, when positive, reads the state as of that revision.
	Rev int64
	// KeysOnly returns the keys without their values.
	KeysOnly bool
	// CountOnly returns no keys, only Count.
	CountOnly bool
	// Count asks for RangeResult.Count: every matching key is walked,
	// not only the first Limit.
	Count bool
	// Sort and Descend order the keys before Limit applies (default:
	// by key, ascending).
	Sort    SortTarget
	Descend bool
	// Revision filters, inclusive; 0 means no bound.
	MinModRev, MaxModRev, MinCreateRev, MaxCreateRev int64
}

// RangeResult is what a ranged read found.
type RangeResult struct {
	KVs []command.KV
	// Rev is the revision of the state the read was served from: the
	// current one, also for a read at a past revision (etcd's header
	// revision).
	Rev int64
	// Count is how many keys matched (the range, After and the filters),
	// before Limit; set when RangeRead.Count or CountOnly asked for it.
	Count int64
}

// NoEnd is End's "every key from Start on".
const NoEnd = "\x00"

func (r *RangeRead) inRange(key string) bool {
	return key >= r.Start && (r.End == NoEnd || key < r.End) && (r.After == "" || key > r.After)
}

func (r *RangeRead) admits(kv *command.KV) bool {
	return (r.MinModRev == 0 || kv.ModRev >= r.MinModRev) && (r.MaxModRev == 0 || kv.ModRev <= r.MaxModRev) &&
		(r.MinCreateRev == 0 || kv.CreateRev >= r.MinCreateRev) && (r.MaxCreateRev == 0 || kv.CreateRev <= r.MaxCreateRev)
}

// Range serves r from one published view (and, for a past revision, the
// history above it).
func (sm *StateMachine) Range(r RangeRead) (RangeResult, error) {
	if err := sm.enter(); err != nil {
		return RangeResult{}, err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	if r.Rev > v.rev {
		return RangeResult{}, fmt.Errorf("%w: revision %d, the state is at %d", ErrFutureRev, r.Rev, v.rev)
	}
	cost := int64(0)
	charge := func(n int64) bool {
		cost += n
		return r.MaxBytes <= 0 || cost <= r.MaxBytes
	}
	var past []pastKey
	if r.Rev > 0 && r.Rev < v.rev {
		var err error
		if past, err = sm.pastKeys(&r, v.rev, charge); err != nil {
			return RangeResult{}, err
		}
	}
	res := RangeResult{Rev: v.rev}
	sorted := r.Sort != SortKey || r.Descend
	walkAll := r.Count || r.CountOnly || sorted
	var (
		picked []*command.KV // sorted reads: every match, then sorted
		arena  valueArena
		over   bool
	)
	take := func(kv *command.KV) {
		if !r.KeysOnly && !charge(int64(len(kv.Value))) {
			over = true
			return
		}
		out := *kv
		if r.KeysOnly {
			out.Value = nil
		} else {
			out.Value = arena.copy(kv.Value)
		}
		res.KVs = append(res.KVs, out)
	}
	walkRange(v.memState, &r, past, func(kv *command.KV) bool {
		if !r.admits(kv) {
			return true
		}
		full := r.Limit > 0 && len(res.KVs) >= r.Limit
		if full && !walkAll {
			return false
		}
		if !charge(command.ReadCost(kv.Key, nil)) {
			over = true
			return false
		}
		res.Count++
		switch {
		case r.CountOnly:
		case sorted:
			picked = append(picked, kv)
		case !full:
			take(kv)
		}
		return !over
	})
	if !over && sorted && !r.CountOnly {
		sortKVs(picked, r.Sort, r.Descend)
		if r.Limit > 0 && len(picked) > r.Limit {
			picked = picked[:r.Limit]
		}
		for _, kv := range picked {
			if take(kv); over {
				break
			}
		}
	}
	if over {
		return RangeResult{}, tooLarge(r.MaxBytes, len(res.KVs))
	}
	if !r.Count && !r.CountOnly {
		res.Count = 0
	}
	return res, nil
}

// sortKVs orders kvs, which are in key order, by target: stably, so keys
// that tie stay in key order (ascending) or reverse key order
// (descending), as etcd's sort of a key-ordered range does.
func sortKVs(kvs []*command.KV, target SortTarget, descend bool) {
	by := func(a, b *command.KV) int {
		switch target {
		case SortVersion:
			return cmp.Compare(a.Version, b.Version)
		case SortCreateRev:
			return cmp.Compare(a.CreateRev, b.CreateRev)
		case SortModRev:
			return cmp.Compare(a.ModRev, b.ModRev)
		case SortValue:
			return bytes.Compare(a.Value, b.Value)
		}
		return strings.Compare(a.Key, b.Key)
	}
	if descend {
		slices.Reverse(kvs)
		slices.SortStableFunc(kvs, func(a, b *command.KV) int { return by(b, a) })
		return
	}
	slices.SortStableFunc(kvs, by)
}

// pastKey is a key's state as of a past revision, where it differs from
// the live state: kv nil means it did not exist then.
type pastKey struct {
	key string
	kv  *command.KV
}

// pastKeys returns, in key order, the keys of r's range that changed
// after r.Rev up to rev (the view's revision), each with its state as of
// r.Rev: the previous state of its first change after r.Rev. The history
// is read through one Pebble iterator, whose meta says what it retains.
func (sm *StateMachine) pastKeys(r *RangeRead, rev int64, charge func(int64) bool) ([]pastKey, error) {
	// The history reaches at least the view's revision once the image
	// is drained.
	it, m, err := sm.historyIter()
	if err != nil {
		return nil, err
	}
	defer it.Close()
	switch {
	case r.Rev < m.oldest-1:
		return nil, &CompactedError{Oldest: m.oldest}
	case m.rev < rev:
		return nil, fmt.Errorf("%w: history at revision %d behind the state's %d", errs.Internal, m.rev, rev)
	}
	seen := make(map[string]*command.KV)
	next := r.Rev + 1
	for it.SeekGE(appendHistoryKey(nil, next)); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 || k[0] != prefixHistory {
			break
		}
		at := int64(readUint64(k[1:]))
		if at > rev {
			break
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("storage: history: %w", err)
		}
		if !charge(int64(len(val)) + command.ReadCostOverhead) {
			return nil, tooLarge(r.MaxBytes, 0)
		}
		if len(val) > 0 && val[0] == historyFormat1 {
			// Written before events kept their previous state: the
			// state before it cannot be rebuilt.
			return nil, &CompactedError{Oldest: at + 1}
		}
		events, err := decodeHistoryRecord(at, bytes.Clone(val))
		if err != nil {
			return nil, err
		}
		for i := range events {
			ev := &events[i]
			if _, done := seen[ev.KV.Key]; done || !r.inRange(ev.KV.Key) {
				continue
			}
			seen[ev.KV.Key] = ev.Prev
		}
		next = at + 1
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("storage: history: %w", err)
	}
	out := make([]pastKey, 0, len(seen))
	for k, kv := range seen {
		out = append(out, pastKey{key: k, kv: kv})
	}
	slices.SortFunc(out, func(a, b pastKey) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// walkRange calls fn, in key order, for every key of r's range (after
// r.After) as of r's revision: the live keys of s, except where past
// says what a key was then. It stops when fn returns false.
func walkRange(s memState, r *RangeRead, past []pastKey, fn func(*command.KV) bool) {
	start := r.Start
	if r.After >= start {
		start = r.After + "\x00"
	}
	if r.End != NoEnd && r.End <= start {
		return
	}
	// emitPast yields the past keys before key ("" with last: all).
	emitPast := func(key string, last bool) bool {
		for len(past) > 0 && (last || past[0].key < key) {
			p := past[0]
			past = past[1:]
			if p.kv != nil && !fn(p.kv) {
				return false
			}
		}
		return true
	}
	stopped := false
	s.keys.AscendGreaterOrEqual(kvItem{key: start}, func(it kvItem) bool {
		if r.End != NoEnd && it.key >= r.End {
			return false
		}
		if !emitPast(it.key, false) {
			stopped = true
			return false
		}
		if len(past) > 0 && past[0].key == it.key {
			p := past[0]
			past = past[1:]
			if p.kv == nil {
				return true
			}
			if !fn(p.kv) {
				stopped = true
				return false
			}
			return true
		}
		if !fn(it.kv) {
			stopped = true
			return false
		}
		return true
	})
	if !stopped {
		emitPast("", true)
	}
}
