package spi

import (
	"context"
	"errors"
	"time"

	"github.com/coordcell/coord/internal/errs"
)

// The recipes retry what failed for want of a quorum, or with an unknown
// outcome, rather than hand every caller a loop: one helper, one wait (a
// quarter election timeout: long enough for a new leader to be found, short
// enough that a waiter notices it within the time a failover takes).

// Retry calls op until it succeeds, or until it should stop, and returns
// nil or the error to report:
//   - ctx ended: ctx.Err();
//   - the session s ended (nil: no session): the session's error;
//   - op failed with an error again rejects: that error.
//
// Between attempts it waits one Backoff of b. op must be idempotent, or
// guarded so that a repeat after an unseen success changes nothing.
func Retry(ctx context.Context, b Backend, s *Session, again func(error) bool, op func() error) error {
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
		if werr := Backoff(ctx, b, s); werr != nil {
			return werr
		}
	}
}

// Retryable reports whether an operation that failed with err may
// succeed if tried again: its outcome was unknown, or no quorum was
// reachable at the time.
func Retryable(err error) bool {
	return errors.Is(err, errs.Ambiguous) || errors.Is(err, errs.NoQuorum)
}

// NotClosed retries everything but the end of the process's way into the
// cell: a read that fails for any other reason may succeed later.
func NotClosed(err error) bool { return !errors.Is(err, errs.Closed) }

// Backoff waits a quarter election timeout before a retry, or returns
// the reason to stop: ctx ended, or the session s (if not nil) ended.
func Backoff(ctx context.Context, b Backend, s *Session) error {
	var ended <-chan struct{}
	if s != nil {
		ended = s.Done()
	}
	t := time.NewTimer(b.ElectionTimeout() / 4)
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
