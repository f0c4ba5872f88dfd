package storage

// Lock-delay: a lock whose holder's session expires (the cell decided it,
// not a Close or an Unlock) is not granted to anyone for a delay, for
// resources that cannot check a fencing token.
//
// The holder's key under locks/{name}/ carries the delay in its value
// (lockq.DelayValue). When an expiry flagged LockDelay (the proposer saw
// such a key: SessionLockDelayed) deletes such a key and the key held
// its lock (it was the head of the lock's queue), the same revision puts
// a delay marker under the lock's queue (lockq's Entry.Marker), with the
// same value and no session. The recipes' grant rule treats a marker as a
// holder that blocks every entry of the queue, older or newer. The
// sessions leader deletes it after the delay (LockDelays lists them).
// Everything here is a function of the applied state and the command, so
// every member writes the same marker; the flag makes the expiry a
// format 5 command, which a member that would not write markers refuses
// rather than diverge.

import (
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/lockq"
)

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
		if !lockq.IsLockEntry(o.key) {
			return true
		}
		if it, ok := v.keys.Get(kvItem{key: o.key}); ok {
			_, delayed = lockq.ParseDelay(it.kv.Value)
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
		out = append(out, LockDelay{Key: key, CreateRev: it.kv.CreateRev, Delay: lockq.MarkerDelay(it.kv.Value)})
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
		e, ok := lockq.ParseKey(key)
		if !ok || e.Election() || e.Kind == lockq.KindDelay {
			continue
		}
		it, found := a.mem.keys.Get(kvItem{key: key})
		if !found || it.kv.Session != id {
			continue
		}
		if _, ok := lockq.ParseDelay(it.kv.Value); !ok {
			continue
		}
		head := true
		a.mem.ascendPrefix(e.Prefix, func(o kvItem) bool {
			kind, ok := lockq.InQueue(e.Prefix, true, o.key)
			if !ok || o.key == key {
				return true
			}
			if kind == lockq.KindDelay || o.kv.CreateRev < it.kv.CreateRev {
				head = false
				return false
			}
			return true
		})
		if head {
			out = append(out, command.KV{Key: e.Marker(), Value: it.kv.Value})
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
