package coord

import (
	"context"
	"errors"
	"time"
)

// The recipes retry what failed for want of a quorum, or with an unknown
// outcome, rather than hand every caller a loop: one helper, one wait (a
// quarter election timeout: long enough for a new leader to be found, short
// enough that a waiter notices it within the time a failover takes).

// retry calls op until it succeeds, or until it should stop, and returns
// nil or the error to report:
//   - ctx ended: ctx.Err();
//   - the session s ended (nil: no session): the session's error;
//   - op failed with an error again rejects: that error.
//
// Between attempts it waits one backoff. op must be idempotent, or
// guarded so that a repeat after an unseen success changes nothing.
func retry(ctx context.Context, b backend, s *Session, again func(error) bool, op func() error) error {
	for {
		err := op()
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if s != nil {
			if serr := s.Err(); serr != nil {
				return serr
			}
		}
		if !again(err) {
			return err
		}
		if werr := backoff(ctx, b, s); werr != nil {
			return werr
		}
	}
}

// retryable reports whether an operation that failed with err may
// succeed if tried again: its outcome was unknown, or no quorum was
// reachable at the time.
func retryable(err error) bool {
	return errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrNoQuorum)
}

// notClosed retries everything but the end of the process's way into the
// cell: a read that fails for any other reason may succeed later.
func notClosed(err error) bool { return !errors.Is(err, ErrClosed) }

// backoff waits a quarter election timeout before a retry, or returns
// the reason to stop: ctx ended, or the session s (if not nil) ended.
func backoff(ctx context.Context, b backend, s *Session) error {
	var ended <-chan struct{}
	if s != nil {
		ended = s.Done()
	}
	t := time.NewTimer(b.electionTimeout() / 4)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-ended:
		return s.Err()
	}
}

// settle waits until everything this member has applied so far has also
// been handed to its listeners (the watch hub and the sessions), so a
// session ended by a change a watcher has seen knows it has ended.
func (n *Node) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, n.electionTimeout())
	defer cancel()
	_ = n.raft.WaitApplied(ctx, n.sm.AppliedIndex())
}
