package coord

// The queue's ordering rules: which entries of a queue hold, and which
// keys a waiting entry must watch. Pure functions of the keys at one
// revision, so every member and every waiter reaches the same answer.

import (
	"cmp"
	"slices"
	"strings"
)

// entry is one well-formed key of a queue.
type entry struct {
	kv    KV
	kind  byte
	limit int // kindSlot: the holder's semaphore limit
}

// parseQueue returns the well-formed entries among kvs, oldest first.
// Keys of another shape under the prefix (a lock whose name extends this
// one's, stray user keys) are not part of the queue.
func parseQueue(prefix string, kinded bool, kvs []KV) []entry {
	out := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		if e, ok := parseEntry(prefix, kinded, kv); ok {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return cmp.Compare(a.kv.CreateRev, b.kv.CreateRev) })
	return out
}

func parseEntry(prefix string, kinded bool, kv KV) (entry, bool) {
	rest, ok := strings.CutPrefix(kv.Key, prefix)
	if !ok {
		return entry{}, false
	}
	e := entry{kv: kv, kind: kindLeader}
	if kinded {
		if len(rest) != 33 {
			return entry{}, false
		}
		e.kind, rest = rest[0], rest[1:]
		switch e.kind {
		case kindMutex, kindWriter, kindReader, kindDelay:
		case kindSlot:
			e.limit = parseLimit(kv.Value)
		default:
			return entry{}, false
		}
	}
	if len(rest) != 32 || strings.IndexFunc(rest, func(r rune) bool {
		return (r < '0' || r > '9') && (r < 'a' || r > 'f')
	}) >= 0 {
		return entry{}, false
	}
	return e, true
}

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

// blockers returns the keys that keep q[i] from holding, nil if it holds.
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
// A lock-delay marker (kindDelay) holds, and blocks every other entry,
// older or newer, until the sessions leader deletes it: it stands for the
// holder whose session expired, whose writes may still be in flight.
func blockers(q []entry, i int) []string {
	me := q[i]
	if me.kind == kindDelay {
		return nil
	}
	for _, e := range q {
		if e.kind == kindDelay {
			return []string{e.kv.Key}
		}
	}
	conflicts := func(e entry) bool {
		switch me.kind {
		case kindReader:
			return e.kind != kindReader
		case kindSlot:
			return e.kind != kindSlot
		}
		return true
	}
	for j := i - 1; j >= 0; j-- {
		if conflicts(q[j]) {
			return []string{q[j].kv.Key}
		}
	}
	if me.kind == kindSlot && i >= me.limit {
		keys := make([]string, 0, me.limit)
		for _, e := range q[i-me.limit : i] {
			keys = append(keys, e.kv.Key)
		}
		return keys
	}
	return nil
}

// holders returns the entries of q that hold, lock-delay markers aside:
// a marker holds for no one, and no grant has its revision as a token.
func holders(q []entry) []entry {
	var out []entry
	for i := range q {
		if q[i].kind != kindDelay && blockers(q, i) == nil {
			out = append(out, q[i])
		}
	}
	return out
}
