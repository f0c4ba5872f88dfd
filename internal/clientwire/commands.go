package clientwire

import (
	"fmt"

	"github.com/coordcell/coord/internal/command"
)

// CheckCommand reports whether a client may propose c: a transaction, the
// creation of a session, the end of one by its holder, or the resolve of
// one of its own writes' outcome (the member names the proposer's owner,
// so a client resolves only its own). Everything else
// (no-ops, a leader's session bookkeeping, an expiry, anything carrying a
// leader's term) is reserved to members, and gives ErrForbidden. It does
// not check ownership: the Handler knows which sessions are the client's.
func CheckCommand(c *command.Command) error {
	switch c.Kind {
	case command.KindTxn:
		if c.Txn == nil || c.Session != nil {
			return fmt.Errorf("%w: malformed transaction", ErrForbidden)
		}
		return nil
	case command.KindSessionCreate, command.KindSessionEnd:
		s := c.Session
		if s == nil || c.Txn != nil || s.Term != 0 || s.Expired || len(s.IDs) != 0 || len(s.Credits) != 0 || s.Clock != 0 {
			return fmt.Errorf("%w: session command with member-only fields", ErrForbidden)
		}
		if c.Kind == command.KindSessionCreate && (s.ID != 0 || s.TTL <= 0) {
			return fmt.Errorf("%w: session create needs a TTL and no ID", ErrForbidden)
		}
		if c.Kind == command.KindSessionEnd && s.ID == 0 {
			return fmt.Errorf("%w: session end without a session", ErrForbidden)
		}
		return nil
	case command.KindResolve:
		if c.Proposer == nil || c.Txn != nil || c.Session != nil {
			return fmt.Errorf("%w: malformed resolve", ErrForbidden)
		}
		return nil
	}
	return fmt.Errorf("%w: command kind %d", ErrForbidden, c.Kind)
}

// SessionsNamed lists the sessions c acts for (the owner of each
// ephemeral put, the session ended), each once: the Handler refuses c
// unless the client owns them all.
func SessionsNamed(c *command.Command) []int64 {
	var ids []int64
	add := func(id int64) {
		if id == 0 {
			return
		}
		for _, x := range ids {
			if x == id {
				return
			}
		}
		ids = append(ids, id)
	}
	if c.Session != nil {
		add(c.Session.ID)
	}
	if c.Txn != nil {
		for op := range c.Txn.AllOps() { // nested transactions' ops too
			add(op.Session)
		}
	}
	return ids
}
