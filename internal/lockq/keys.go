// Package lockq is the lock grammar: the one place that knows how the
// recipes' queues are written in the keyspace and how they are read
// back. The recipes (Mutex, RWMutex, Semaphore, Acquire, Election) write
// their entries with it; the state machine reads lock keys and writes
// lock-delay markers with it; a member serving clients reads an entry's
// session from its name with it; the admin handler groups queues with it.
//
// A lock name is a queue of keys under locks/{name}/, an election group
// one under elections/{group}/. Each entry is an ephemeral key of its
// holder's session named {kind}{16 hex session}{16 hex sequence} (no
// kind byte under elections/). Session plus sequence names every
// acquisition uniquely: a key is never reused. The queue's order is
// create revision; which entries hold is a pure function of the keys at
// one revision (order.go), so every member and every waiter agrees.
package lockq

import (
	"strconv"
	"strings"
)

// The key spaces of the recipes.
const (
	LockSpace     = "locks/"
	ElectionSpace = "elections/"
)

// LockPrefix is the queue of lock name: locks/{name}/.
func LockPrefix(name string) string { return LockSpace + name + "/" }

// ElectionPrefix is the queue of election group: elections/{group}/.
func ElectionPrefix(group string) string { return ElectionSpace + group + "/" }

// The kinds of queue entry: the first byte of a lock entry's name.
const (
	KindMutex  = 'm' // Mutex and Acquire: exclusive
	KindWriter = 'w' // RWMutex.Lock: exclusive
	KindReader = 'r' // RWMutex.RLock: shared with other readers
	KindSlot   = 's' // Semaphore: shared by up to its limit (the key's value)
	// KindDelay is a lock-delay marker, written by the cell (not by a
	// recipe) when a holder's session expired.
	KindDelay = 'd'
	// KindLeader is an election candidacy: exclusive; election keys
	// carry no kind byte.
	KindLeader = 0
)

// idLen is the length of an entry's identity: session then sequence, 16
// lower-case hex digits each.
const idLen = 32

// EntryKey is the key of an entry under prefix for session's acquisition
// number seq: of kind when kinded (a lock's queue), without a kind byte
// otherwise (an election's).
func EntryKey(prefix string, kinded bool, kind byte, session int64, seq uint64) string {
	b := make([]byte, 0, len(prefix)+1+idLen)
	b = append(b, prefix...)
	if kinded {
		b = append(b, kind)
	}
	b = appendHex16(b, uint64(session))
	b = appendHex16(b, seq)
	return string(b)
}

func appendHex16(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[(v>>uint(shift))&0xf])
	}
	return b
}

// Entry is a key read as a queue entry.
type Entry struct {
	// Prefix is the entry's queue: locks/{name}/ or elections/{group}/,
	// with a name of one byte or more.
	Prefix string
	// Kind is the entry's kind; KindLeader under elections/.
	Kind byte
	// Session is the session its name claims.
	Session int64
	// id is the 32 hex digits of session and sequence.
	id string
}

// Election reports whether the entry is an election candidacy.
func (e Entry) Election() bool { return strings.HasPrefix(e.Prefix, ElectionSpace) }

// Marker is the key of the lock-delay marker that stands for e's hold
// once its session expired: the same identity, of kind KindDelay.
func (e Entry) Marker() string { return e.Prefix + string(rune(KindDelay)) + e.id }

// ParseKey reads key as an entry of a lock's or an election's queue;
// ok is false for any other key, including keys of another shape under
// locks/ or elections/ (stray user keys, a lock whose name extends
// another's).
func ParseKey(key string) (e Entry, ok bool) {
	var space string
	kinded := false
	switch {
	case strings.HasPrefix(key, LockSpace):
		space, kinded = LockSpace, true
	case strings.HasPrefix(key, ElectionSpace):
		space = ElectionSpace
	default:
		return Entry{}, false
	}
	name := idLen
	if kinded {
		name++
	}
	// The queue's prefix: the space, a name of one byte or more, "/".
	if len(key) < len(space)+2+name {
		return Entry{}, false
	}
	e.Prefix, e.id = key[:len(key)-name], key[len(key)-idLen:]
	if !strings.HasSuffix(e.Prefix, "/") {
		return Entry{}, false
	}
	if kinded {
		e.Kind = key[len(key)-name]
		switch e.Kind {
		case KindMutex, KindWriter, KindReader, KindSlot, KindDelay:
		default:
			return Entry{}, false
		}
	}
	if !lowerHex(e.id) {
		return Entry{}, false
	}
	id, err := strconv.ParseUint(e.id[:16], 16, 64)
	if err != nil {
		return Entry{}, false
	}
	e.Session = int64(id)
	return e, true
}

// InQueue reads key as an entry of the queue under prefix: a lock's
// (kinded) or an election's. ok is false for keys of another shape under
// it, which are not part of the queue.
func InQueue(prefix string, kinded bool, key string) (kind byte, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return 0, false
	}
	kind = KindLeader
	if kinded {
		if len(rest) != 1+idLen {
			return 0, false
		}
		kind, rest = rest[0], rest[1:]
		switch kind {
		case KindMutex, KindWriter, KindReader, KindSlot, KindDelay:
		default:
			return 0, false
		}
	}
	if len(rest) != idLen || !lowerHex(rest) {
		return 0, false
	}
	return kind, true
}

// IsDelayMarker reports whether key is a lock-delay marker's name.
func IsDelayMarker(key string) bool {
	e, ok := ParseKey(key)
	return ok && e.Kind == KindDelay
}

// IsLockEntry reports whether key is an entry of a lock's queue (a
// marker included).
func IsLockEntry(key string) bool {
	e, ok := ParseKey(key)
	return ok && !e.Election()
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// QueueName splits a key under locks/ or elections/ into its space, the
// queue's name (what lies before the key's last slash: names may hold
// slashes, entry names do not) and whether it is an election's; ok is
// false outside both spaces or without a name. It groups keys into
// queues for reports, whatever their shape.
func QueueName(key string) (name string, election, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(key, LockSpace):
		rest = key[len(LockSpace):]
	case strings.HasPrefix(key, ElectionSpace):
		rest, election = key[len(ElectionSpace):], true
	default:
		return "", false, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", false, false
	}
	return rest[:i], election, true
}
