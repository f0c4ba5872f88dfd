package coord

import (
	"context"

	"github.com/coordcell/coord/internal/spi"
)

// The recipes retry what failed for want of a quorum, or with an unknown
// outcome, rather than hand every caller a loop: spi's one helper and its
// one wait (a quarter election timeout), here with a Session.

// retry is spi.Retry on b, stopping when the session s (nil: none) ends.
func retry(ctx context.Context, b *cellOps, s *Session, again func(error) bool, op func() error) error {
	return spi.Retry(ctx, b.b, s.liveness(), again, op)
}

// backoff is spi.Backoff on b, ending early when the session s (nil:
// none) ends.
func backoff(ctx context.Context, b *cellOps, s *Session) error {
	return spi.Backoff(ctx, b.b, s.liveness())
}

// retryable reports whether an operation that failed with err may
// succeed if tried again (spi.Retryable).
func retryable(err error) bool { return spi.Retryable(err) }

// notClosed retries everything but the end of the process's way into the
// cell (spi.NotClosed).
func notClosed(err error) bool { return spi.NotClosed(err) }

// liveness is s's, nil for no session.
func (s *Session) liveness() *spi.Session {
	if s == nil {
		return nil
	}
	return s.live
}
