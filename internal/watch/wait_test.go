package watch

import (
	"context"
	"time"
)

// The blocking forms of Start the tests drive the hub with.

// Watch is Start waiting for the end, and returns why it ended;
// progressNow, when it receives, asks for a progress report.
func (h *Hub) Watch(ctx context.Context, prefix string, from int64, every time.Duration, e Emitter, progressNow <-chan struct{}) error {
	done := make(chan error, 1)
	s := h.Start(ctx, prefix, from, every, e, nil, func(err error) { done <- err })
	for {
		select {
		case err := <-done:
			return err
		case <-progressNow:
			s.RequestProgress()
		}
	}
}

// WatchAt is Start with pos, waiting for the end.
func (h *Hub) WatchAt(ctx context.Context, prefix string, from int64, e Emitter, pos *Position) error {
	done := make(chan error, 1)
	h.Start(ctx, prefix, from, 0, e, pos, func(err error) { done <- err })
	return <-done
}
