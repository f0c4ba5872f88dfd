package member

import (
	"fmt"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/lockq"
)

// A grant is per prefix, and every client that may take locks holds the
// same one (locks/): on its own it would let any of them delete another
// holder's key and take the lock. So a client writes the recipes' keys
// of its own sessions only. Each queue entry names its session (see
// lockq.EntryKey), which lets the member refuse, before proposing, a write
// of an entry that names another client's session, with a message that
// says why; and every client's writing transaction carries the client as
// its actor (command.Txn.Actor), so that the state machine applies the
// same rule, for every ephemeral key, against the state the command
// meets: that also covers a prefix delete, whose keys nobody can list in
// advance. An admin grant lifts both.

// checkQueueEntries refuses, for a client without an admin grant, a
// write of a queue entry that is not its own: a put of an entry with
// another session than the one its name claims (sortSessions then checks
// that session is the client's), a delete of an entry whose session this
// member knows to be another owner's, and any write of a lock-delay
// marker. A session this member does not know yet is left to the state
// machine, which decides on the applied state.
func (h *clientHandler) checkQueueEntries(t *command.Txn) error {
	if h.grant.Admin {
		return nil
	}
	for op := range t.AllOps() { // nested transactions' ops too
		if op.Type == command.OpGet || op.Prefix {
			continue
		}
		e, ok := lockq.ParseKey(op.Key)
		session := e.Session
		switch {
		case !ok:
		case e.Kind == lockq.KindDelay:
			return fmt.Errorf("%w: %q is a lock-delay marker, which only the cell removes (an admin grant may)",
				errs.Forbidden, op.Key)
		case op.Type == command.OpPut && op.Session != session:
			return fmt.Errorf("%w: %q is session %d's entry in its queue: a client writes it only as that session's ephemeral key",
				errs.Forbidden, op.Key, session)
		case op.Type == command.OpDelete:
			si, known, err := h.n.sm.Session(session)
			if err != nil {
				return h.n.stateErr(err)
			}
			if known && si.Owner != h.owner {
				return fmt.Errorf("%w: %q belongs to session %d, not to client %q (an admin grant may delete it)",
					errs.Forbidden, op.Key, session, h.identity)
			}
		}
	}
	return nil
}

// markActor makes t carry the client as its actor when it writes, so the
// state machine holds it to its own sessions' keys (command.Txn.Actor).
// A transaction that only reads stays in the format older members read.
func (h *clientHandler) markActor(t *command.Txn) {
	for op := range t.AllOps() {
		if op.Type != command.OpGet {
			t.Actor, t.Admin = h.owner, h.grant.Admin
			return
		}
	}
}
