package storage

// Lock-delay: a lock whose holder's session expires (the cell decided it,
// not a Close or an Unlock) is not granted to anyone for a delay, for
// resources that cannot check a fencing token.
//
// The holder's key under locks/{name}/ carries the delay in its value
// (LockDelayValue). When an expiry flagged LockDelay (the proposer saw
// such a key: SessionLockDelayed) deletes such a key and the key held
// its lock (it was the head of the lock's queue), the same revision puts
// a delay marker under the lock's queue: locks/{name}/d{32 hex}, with the
// same value and no session. The recipes' grant rule treats a marker as a
// holder that blocks every entry of the queue, older or newer. The
// sessions leader deletes it after the delay (LockDelays lists them).
// Everything here is a function of the applied state and the command, so
// every member writes the same marker; the flag makes the expiry a
// format 5 command, which a member that would not write markers refuses
// rather than diverge.

import (
	"strconv"
	"strings"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// MaxLockDelay bounds a lock-delay: a value asking for more is not one,
// so a stray or hostile key cannot keep a lock from being granted for
// long.
const MaxLockDelay = 60 * time.Second

// lockDelayTag starts a lock-delay value: no semaphore limit (digits
// only) and no empty mutex value begins with it.
const lockDelayTag = "lock-delay:"

// lockQueuePrefix is where lock queues live; markers are written only
// there.
const lockQueuePrefix = "locks/"

// lockEntryLen is the length of a queue entry's name after its lock's
// prefix: the kind byte, then 32 hex digits (session, sequence).
const lockEntryLen = 33

// kindDelay is the kind byte of a delay marker.
const kindDelay = 'd'

// LockDelayValue returns the value of a lock key whose hold is followed
// by a delay of d when its session expires.
func LockDelayValue(d time.Duration) []byte {
	return strconv.AppendInt([]byte(lockDelayTag), int64(d), 10)
}

// ParseLockDelay returns the delay a lock key's value asks for; ok is
// false when the value asks for none, or for one outside (0, MaxLockDelay].
func ParseLockDelay(v []byte) (d time.Duration, ok bool) {
	rest, found := strings.CutPrefix(string(v), lockDelayTag)
	if !found || len(rest) == 0 || len(rest) > 19 {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n <= 0 || time.Duration(n) > MaxLockDelay || strconv.FormatInt(n, 10) != rest {
		return 0, false
	}
	return time.Duration(n), true
}

// lockEntry splits a key under locks/ into its queue prefix and entry
// name; ok is false for keys of another shape.
func lockEntry(key string) (prefix, name string, ok bool) {
	if !strings.HasPrefix(key, lockQueuePrefix) || len(key) < len(lockQueuePrefix)+1+lockEntryLen {
		return "", "", false
	}
	prefix, name = key[:len(key)-lockEntryLen], key[len(key)-lockEntryLen:]
	if !strings.HasSuffix(prefix, "/") || len(prefix) <= len(lockQueuePrefix)+1 {
		return "", "", false
	}
	switch name[0] {
	case 'm', 'w', 'r', 's', kindDelay:
	default:
		return "", "", false
	}
	for _, c := range name[1:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", false
		}
	}
	return prefix, name, true
}

// IsLockDelayMarker reports whether key is a delay marker's name.
func IsLockDelayMarker(key string) bool {
	_, name, ok := lockEntry(key)
	return ok && name[0] == kindDelay
}

// SessionLockDelayed reports whether session id owns, in the applied
// state, a lock key that asks for a lock-delay: then its expiry is
// proposed with command.Session.LockDelay.
func (sm *StateMachine) SessionLockDelayed(id int64) (bool, error) {
	if err := sm.enter(); err != nil {
		return false, err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	delayed := false
	v.owned.AscendGreaterOrEqual(ownedItem{session: id}, func(o ownedItem) bool {
		if o.session != id {
			return false
		}
		if _, _, ok := lockEntry(o.key); !ok {
			return true
		}
		if it, ok := v.keys.Get(kvItem{key: o.key}); ok {
			_, delayed = ParseLockDelay(it.kv.Value)
		}
		return !delayed
	})
	return delayed, nil
}

// LockDelay is one delay marker in the applied state.
type LockDelay struct {
	Key       string
	CreateRev int64
	Delay     time.Duration
}

// LockDelays lists the delay markers in the applied state, in key order.
// A marker whose value is not a valid delay (someone overwrote it) is
// listed with MaxLockDelay, so it still ends.
func (sm *StateMachine) LockDelays() ([]LockDelay, error) {
	if err := sm.enter(); err != nil {
		return nil, err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	var out []LockDelay
	v.delays.Ascend(func(key string) bool {
		it, ok := v.keys.Get(kvItem{key: key})
		if !ok {
			return true
		}
		d, ok := ParseLockDelay(it.kv.Value)
		if !ok {
			d = MaxLockDelay
		}
		out = append(out, LockDelay{Key: key, CreateRev: it.kv.CreateRev, Delay: d})
		return true
	})
	return out, nil
}

// expiryMarkers returns the markers an expiry of session id writes: one
// for each of its keys that asks for a delay and holds its lock as of
// the state before the expiry, that is, no other entry of the queue is
// older and no marker is already there (then the key was not granted).
// It runs before the expiry deletes anything.
func (a *applier) expiryMarkers(id int64, owned []string) []command.KV {
	var out []command.KV
	for _, key := range owned {
		prefix, name, ok := lockEntry(key)
		if !ok || name[0] == kindDelay {
			continue
		}
		it, found := a.mem.keys.Get(kvItem{key: key})
		if !found || it.kv.Session != id {
			continue
		}
		if _, ok := ParseLockDelay(it.kv.Value); !ok {
			continue
		}
		head := true
		a.mem.ascendPrefix(prefix, func(o kvItem) bool {
			oprefix, oname, ok := lockEntry(o.key)
			if !ok || oprefix != prefix || o.key == key {
				return true
			}
			if oname[0] == kindDelay || o.kv.CreateRev < it.kv.CreateRev {
				head = false
				return false
			}
			return true
		})
		if head {
			out = append(out, command.KV{Key: prefix + string(kindDelay) + name[1:], Value: it.kv.Value})
		}
	}
	return out
}

// putMarkers writes the markers at revision rev (the expiry's) and
// returns their events. A marker replaces a key of the same size, so it
// needs no quota check.
func (a *applier) putMarkers(markers []command.KV, rev int64) ([]Event, error) {
	var events []Event
	for i := range markers {
		op := command.Op{Type: command.OpPut, Key: markers[i].Key, Value: markers[i].Value}
		kv, prev, err := a.put(&op, rev)
		if err != nil {
			return nil, err
		}
		kv.Value = append([]byte(nil), kv.Value...)
		events = append(events, Event{Type: EventPut, KV: kv, Prev: prev})
	}
	return events, nil
}
