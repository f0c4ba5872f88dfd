package storage

import (
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/lockq"
)

// A client's transaction carries its actor (command.Txn.Actor: the owner
// name its sessions carry), so that the rule "a client writes for, and
// over, its own sessions only" holds in the state machine itself, as a
// function of the applied state and the command: every member reaches the
// same verdict, whatever a member's own admission checks missed or raced
// with (a key that became another session's between the check and the
// apply, a prefix delete whose range nobody could check in advance).

// actorMay reports whether t's actor may run ops (the branch chosen):
// each ephemeral put must be for a session of the actor, and unless t is
// an admin's, no key the ops delete or overwrite may be an ephemeral key
// of a session the actor does not own, or a lock-delay marker (which
// stands for an expired holder and only the cell may remove). A
// transaction without an actor (a member's) may do anything. A missing
// session is left to the session check, which refuses it on its own.
func (a *applier) actorMay(t *command.Txn, ops []command.Op) bool {
	if t.Actor == "" {
		return true
	}
	for i := range ops {
		op := &ops[i]
		if op.Type == command.OpPut && op.Session != 0 {
			if owner, ok := a.sessionOwner(op.Session); ok && owner != t.Actor {
				return false
			}
		}
		if t.Admin || op.Type == command.OpGet {
			continue
		}
		if op.Prefix { // a delete of every key under op.Key
			ok := true
			a.mem.ascendPrefix(op.Key, func(it kvItem) bool {
				ok = !a.foreignKey(it.key, it.kv.Session, t.Actor)
				return ok
			})
			if !ok {
				return false
			}
			continue
		}
		var session int64
		if it, found := a.mem.keys.Get(kvItem{key: op.Key}); found {
			session = it.kv.Session
		}
		if a.foreignKey(op.Key, session, t.Actor) {
			return false
		}
	}
	return true
}

// foreignKey reports whether key, owned by session (0: none), is out of
// actor's reach: a lock-delay marker, or an ephemeral key of a session
// another owns. A key whose session is unknown (which the state never
// holds: an ended session's keys go with it) counts as another's.
func (a *applier) foreignKey(key string, session int64, actor string) bool {
	if lockq.IsDelayMarker(key) {
		return true
	}
	if session == 0 {
		return false
	}
	owner, ok := a.sessionOwner(session)
	return !ok || owner != actor
}

// sessionOwner returns the owner of session id as of the entries applied
// so far ("" for a member's own), and whether it exists.
func (a *applier) sessionOwner(id int64) (string, bool) {
	it, ok := a.mem.sessions.Get(sessionItem{id: id})
	return it.owner, ok
}
