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

// AmbiguousError is a write whose call ended (its context did, or the way
// into the cell closed) before the write was seen to apply: Proposer
// names it (its floor cleared: that is the proposer's, not the write's),
// and the root hands it out as its own *AmbiguousError, whose ID
// Outcome settles. Backends return it; a member maps raftnode's to it.
type AmbiguousError struct {
	Proposer command.Proposer
	Err      error
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%v: %v", errs.Ambiguous, e.Err)
}

// Unwrap makes the error both ErrAmbiguous and its cause.
func (e *AmbiguousError) Unwrap() []error { return []error{errs.Ambiguous, e.Err} }

// CompactedError says a watch needed revisions older than the retained
// history. It matches ErrCompacted with errors.Is.
type CompactedError struct {
	// Oldest is the oldest revision still available: a watch may resume
	// from Oldest-1 or later.
	Oldest int64
}

// Error says which revision is the oldest still available.
func (e *CompactedError) Error() string {
	return fmt.Sprintf("%v: the oldest revision still available is %d", errs.Compacted, e.Oldest)
}

// Is makes errors.Is(err, errs.Compacted) hold.
func (e *CompactedError) Is(target error) bool { return target == errs.Compacted }

// SlowError ends a watcher whose consumer fell too far behind.
type SlowError struct {
	// LastRev is the revision of the last event delivered: resume with a
	// watch from it.
	LastRev int64
	// Lag is how many revisions behind the member's head it was.
	Lag int64
}

// Error says how far behind the watch was and where to resume.
func (e *SlowError) Error() string {
	return fmt.Sprintf("%v: %d revisions behind; resume from revision %d", errs.SlowWatcher, e.Lag, e.LastRev)
}

// Is makes errors.Is(err, errs.SlowWatcher) hold.
func (e *SlowError) Is(target error) bool { return target == errs.SlowWatcher }
