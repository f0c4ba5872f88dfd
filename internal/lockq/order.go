package lockq

// The queue's ordering rules: which entries of a queue hold, and which
// keys a waiting entry must watch. Pure functions of the keys at one
// revision, so every member and every waiter reaches the same answer.

import (
	"cmp"
	"slices"
	"strconv"
)

// Waiter is one well-formed entry of a queue, with the item it was read
// from.
type Waiter[T any] struct {
	Item  T
	Key   string
	Rev   int64 // create revision: the queue's order, and the hold's token
	Kind  byte
	Limit int // KindSlot: the holder's semaphore limit
}

// Queue returns the well-formed entries among items under prefix, oldest
// first; fields reads an item's key, create revision and value. Keys of
// another shape under the prefix are not part of the queue.
func Queue[T any](prefix string, kinded bool, items []T, fields func(*T) (key string, createRev int64, value []byte)) []Waiter[T] {
	out := make([]Waiter[T], 0, len(items))
	for i := range items {
		key, rev, value := fields(&items[i])
		kind, ok := InQueue(prefix, kinded, key)
		if !ok {
			continue
		}
		w := Waiter[T]{Item: items[i], Key: key, Rev: rev, Kind: kind}
		if kind == KindSlot {
			w.Limit = parseLimit(value)
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b Waiter[T]) int { return cmp.Compare(a.Rev, b.Rev) })
	return out
}

// SlotValue is the value of a semaphore slot of n places.
func SlotValue(n int) []byte { return strconv.AppendInt(nil, int64(n), 10) }

func parseLimit(v []byte) int {
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' || n > 1<<30 {
			return 1
		}
		n = n*10 + int(c-'0')
	}
	return max(n, 1)
}

// Blockers returns the keys that keep q[i] from holding, nil if it holds.
// Every kind may share a name with every other without breaking any
// kind's promise: an exclusive entry holds only at the head; a reader
// when no non-reader is before it; a semaphore slot when no non-slot is
// before it and fewer than its limit slots are.
//
// The keys returned are the ones to watch: for an exclusive entry its
// predecessor; for a reader (and a slot blocked by another kind) the
// nearest entry before it of a kind that blocks it (those before that one
// cannot free it while that one stays); for a slot blocked by the limit,
// the limit entries right before it: any of them leaving frees a place,
// while an entry leaving further ahead does not change which entries
// those are.
//
// A lock-delay marker (KindDelay) holds, and blocks every other entry,
// older or newer, until the sessions leader deletes it: it stands for the
// holder whose session expired, whose writes may still be in flight.
func Blockers[T any](q []Waiter[T], i int) []string {
	me := q[i]
	if me.Kind == KindDelay {
		return nil
	}
	for _, e := range q {
		if e.Kind == KindDelay {
			return []string{e.Key}
		}
	}
	conflicts := func(e Waiter[T]) bool {
		switch me.Kind {
		case KindReader:
			return e.Kind != KindReader
		case KindSlot:
			return e.Kind != KindSlot
		}
		return true
	}
	for j := i - 1; j >= 0; j-- {
		if conflicts(q[j]) {
			return []string{q[j].Key}
		}
	}
	if me.Kind == KindSlot && i >= me.Limit {
		keys := make([]string, 0, me.Limit)
		for _, e := range q[i-me.Limit : i] {
			keys = append(keys, e.Key)
		}
		return keys
	}
	return nil
}

// Holders returns the entries of q that hold, lock-delay markers aside:
// a marker holds for no one, and no grant has its revision as a token.
func Holders[T any](q []Waiter[T]) []Waiter[T] {
	var out []Waiter[T]
	for i := range q {
		if q[i].Kind != KindDelay && Blockers(q, i) == nil {
			out = append(out, q[i])
		}
	}
	return out
}
