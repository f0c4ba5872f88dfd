package watch

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
)

// Current lists a waiting watch only when no event under its prefix up
// to the head is still to reach its emitter.
func TestCurrentListsOnlyWatchesWithNothingToCome(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 10)
	g := h.join("k")
	defer h.leave(g)
	p := NewPosition()
	current := func() []int {
		_, got := h.Current([]*Position{p}, nil)
		return got
	}
	require.Empty(t, current(), "not yet waiting")
	p.g.Store(g)
	p.parked.Store(0)
	require.Equal(t, []int{0}, current())

	h.Publish([]storage.Revision{f.add("other")})
	head, got := h.Current([]*Position{p}, nil)
	require.Equal(t, []int{0}, got, "a change elsewhere: still current")
	require.Equal(t, int64(1), head)

	h.Publish([]storage.Revision{f.add("k")})
	require.Empty(t, current(), "revision 2 under k has not reached it")
	p.parked.Store(2)
	require.Equal(t, []int{0}, current(), "delivered up to 2")

	p.parked.Store(-1)
	require.Empty(t, current(), "running")

	p.parked.Store(2)
	h.Reset(5) // a snapshot: revisions 3 to 5 were never published
	require.Empty(t, current(), "the window starts after it: the history must be read")
}

// WatchAt's position follows the watch: waiting at the revision it
// delivered up to, running while it delivers, gone when it ends.
func TestWatchAtPositionFollowsTheWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeHistory{oldest: 1}
		h := NewHub(f, 10)
		r := newRecorder()
		p := NewPosition()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.WatchAt(ctx, "k", 0, r, p) }()
		synctest.Wait()
		_, got := h.Current([]*Position{p}, nil)
		require.Equal(t, []int{0}, got)

		h.Publish([]storage.Revision{f.add("k")})
		require.Equal(t, int64(1), r.next(t).rev)
		synctest.Wait()
		require.Equal(t, int64(1), p.parked.Load())
		_, got = h.Current([]*Position{p}, nil)
		require.Equal(t, []int{0}, got)

		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		require.Equal(t, int64(-1), p.parked.Load())
	})
}
