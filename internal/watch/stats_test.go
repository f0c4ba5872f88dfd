package watch

import (
	"context"
	"testing"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
)

// slowAfter is an Emitter that takes n events and then ends the watch as
// a watch whose consumer fell behind.
type slowAfter struct{ n int }

func (s *slowAfter) Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error {
	if s.n == 0 {
		return &SlowError{LastRev: rev - 1, Lag: 1}
	}
	s.n--
	return nil
}

func (s *slowAfter) Progress(ctx context.Context, rev int64) error { return nil }

func TestStatsCountWatchersEventsAndEnds(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	for range 5 {
		f.add("k")
	}
	h := NewHub(f, 16)
	require.Equal(t, Stats{}, h.Stats())

	// A live watcher counts while it runs, and each event it is given.
	ctx, cancel := context.WithCancel(context.Background())
	r := newRecorder()
	done := make(chan error, 1)
	go func() { done <- h.Watch(ctx, "k", 0, 0, r, nil) }()
	for range 5 {
		r.next(t)
	}
	require.Equal(t, int64(1), h.Stats().Watchers)
	h.Publish([]storage.Revision{f.add("k")})
	r.next(t)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	s := h.Stats()
	require.Zero(t, s.Watchers, "an ended watch no longer counts")
	require.Equal(t, uint64(6), s.Events)
	require.Zero(t, s.SlowEnds)
	require.Zero(t, s.CompactedEnds, "a cancelled watch is neither slow nor compacted")

	// An emitter that gives up on a slow consumer: the events it took
	// count, the refused one does not.
	err := h.Watch(context.Background(), "k", 0, 0, &slowAfter{n: 2}, nil)
	require.ErrorIs(t, err, errs.SlowWatcher)
	s = h.Stats()
	require.Equal(t, uint64(1), s.SlowEnds)
	require.Equal(t, uint64(8), s.Events)

	// A watch from below the retained history.
	f.mu.Lock()
	f.oldest = 4
	f.mu.Unlock()
	err = h.Watch(context.Background(), "k", 1, 0, newRecorder(), nil)
	require.ErrorIs(t, err, errs.Compacted)
	s = h.Stats()
	require.Equal(t, uint64(1), s.CompactedEnds)
	require.Equal(t, uint64(1), s.SlowEnds)
	require.Zero(t, s.Watchers)
}
