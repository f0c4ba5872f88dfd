package watch

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
)

// parkedCount returns how many watches are parked on the hub's groups.
func parkedCount(h *Hub) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, g := range h.groups {
		n += len(g.parked)
	}
	return n
}

// waitFor polls cond, the state it reads having no channel to wait on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Quiet watches wait with no goroutine: a publish sets going only the
// ones of its prefix, each delivers and parks again, and each watch's
// end is told once, after which it is gone from the hub.
func TestParkedWatchesHoldNoGoroutine(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 16)
	const n = 200
	g0 := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	recs := make([]*recorder, n)
	done := make(chan error, n)
	for i := range recs {
		recs[i] = newRecorder()
		h.Start(ctx, fmt.Sprintf("w/%03d/", i), 0, 0, recs[i], nil, func(err error) { done <- err })
	}
	waitFor(t, "every watch parked", func() bool { return parkedCount(h) == n })
	waitFor(t, "the starting goroutines gone", func() bool { return runtime.NumGoroutine()-g0 <= n/20 })

	for i := 0; i < n; i += 40 {
		r := f.add(fmt.Sprintf("w/%03d/k", i))
		h.Publish([]storage.Revision{r})
		g := recs[i].next(t)
		require.Equal(t, r.Rev, g.rev)
		require.True(t, g.end)
	}
	waitFor(t, "every watch parked again", func() bool { return parkedCount(h) == n })
	for i, r := range recs {
		require.Empty(t, r.ch, "watch %d got what was not under its prefix", i)
	}

	cancel()
	for range n {
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("a watch's end was not told")
		}
	}
	require.Zero(t, h.Stats().Watchers)
	require.Zero(t, parkedCount(h))
	h.mu.RLock()
	require.Empty(t, h.groups, "every group left")
	h.mu.RUnlock()
}

// A parked watch wakes for its progress interval and for a request, and
// reports progress at the head each time.
func TestParkedWatchWakesForProgress(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	f.add("other")
	h := NewHub(f, 16)
	r := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := h.Start(ctx, "p/", 1, 20*time.Millisecond, r, nil, func(err error) { done <- err })
	g := r.next(t) // the interval passed
	require.True(t, g.progress)
	require.EqualValues(t, 1, g.rev)

	h.Publish([]storage.Revision{f.add("other")})
	s.RequestProgress()
	for g = r.next(t); g.rev < 2; g = r.next(t) {
	}
	require.True(t, g.progress, "a report at the head after a change elsewhere")

	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// Close ends every watch with ErrClosed, parked or not, and a watch
// started after it at once.
func TestCloseEndsEveryWatch(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 16)
	const n = 20
	done := make(chan error, n+1)
	for i := range n {
		h.Start(context.Background(), fmt.Sprintf("c/%d/", i), 0, 0, newRecorder(), nil, func(err error) { done <- err })
	}
	waitFor(t, "every watch parked", func() bool { return parkedCount(h) == n })
	h.Close()
	h.Start(context.Background(), "late/", 0, 0, newRecorder(), nil, func(err error) { done <- err })
	for range n + 1 {
		select {
		case err := <-done:
			require.ErrorIs(t, err, errs.Closed)
		case <-time.After(10 * time.Second):
			t.Fatal("a watch did not end")
		}
	}
	require.Zero(t, h.Stats().Watchers)
}
