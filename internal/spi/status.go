package spi

import (
	"fmt"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
)

// ResultErr maps the state machine's status for cmd to the package's
// errors: the one map, for a member's own commands and for the results a
// member hands its clients. nil for a result to return as it is
// (StatusOK, and StatusNotApplied: a resolve's answer, which Outcome
// reads).
func ResultErr(cmd *command.Command, res command.Result) error {
	switch res.Status {
	case command.StatusOK:
		if res.Repeat && res.Trimmed {
			return fmt.Errorf("%w: the write applied at revision %d, but its reads were not kept for a repeat", errs.Retired, res.Rev)
		}
		return nil
	case command.StatusNotApplied:
		return nil
	case command.StatusQuotaExceeded:
		return errs.QuotaExceeded
	case command.StatusNoSession:
		return errs.SessionExpired
	case command.StatusRetired:
		return fmt.Errorf("%w: the write was sent again after the cell retired its record; it did not apply now", errs.Retired)
	case command.StatusTooManySessions:
		if cmd.Session != nil && cmd.Session.MaxSessions > 0 {
			return fmt.Errorf("%w: the identity holds %d sessions, the limit", errs.TooManySessions, cmd.Session.MaxSessions)
		}
		return errs.TooManySessions
	case command.StatusForbidden:
		return fmt.Errorf("%w: the write would delete or overwrite another session's key, or write for one", errs.Forbidden)
	case command.StatusReadTooLarge:
		if cmd.Txn != nil && cmd.Txn.ReadLimit > 0 {
			return fmt.Errorf("%w: the transaction's gets would read more than %d bytes (keys and values, %d more per key); "+
				"nothing changed: read less in one transaction", errs.ReadTooLarge, cmd.Txn.ReadLimit, command.ReadCostOverhead)
		}
		return fmt.Errorf("%w: the transaction's gets would read more than the member's Config.MaxReadBytes; "+
			"nothing changed: read less in one transaction", errs.ReadTooLarge)
	}
	return fmt.Errorf("%w: the cell refused the command (status %d)", errs.Internal, res.Status)
}
