package watch

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
)

// counter is an Emitter that counts what it is handed.
type counter struct {
	mu       sync.Mutex
	events   int
	progress []int64
}

func (c *counter) Event(context.Context, int64, *storage.Event, bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events++
	return nil
}

func (c *counter) Progress(_ context.Context, rev int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.progress = append(c.progress, rev)
	return nil
}

func (c *counter) reports() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.progress...)
}

// runChanges runs WatchChanges until the bubble's test ends.
func runChanges(t *testing.T, h *Hub, prefix string, from int64, every time.Duration) *counter {
	c := &counter{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.WatchChanges(ctx, prefix, from, every, c) }()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	return c
}

// In a cell at rest, watches on the shared clock are not woken at all:
// the hub never asks their emitters for a report it would drop.
func TestWatchChangesAtRestAreNotWoken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeHistory{oldest: 1}
		f.add("other")
		h := NewHub(f, 10)
		quiet := runChanges(t, h, "quiet/", 1, time.Second)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.Empty(t, quiet.reports(), "nothing newer than the start to tell")

		// The head moves elsewhere: one report at the next tick, then quiet
		// again.
		h.Publish([]storage.Revision{f.add("other")})
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, []int64{2}, quiet.reports())
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.Equal(t, []int64{2}, quiet.reports(), "told 2 already; the head is still 2")
	})
}

// A watch that caught up through the history, with nothing under its
// prefix, is past its last report though the head has not moved since:
// the next tick still wakes it, so its client learns it is current.
func TestWatchChangesResumedBehindReportsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeHistory{oldest: 1}
		for range 5 {
			f.add("other")
		}
		h := NewHub(f, 10)
		// One watch on the clock before, so it has ticked without waking.
		early := runChanges(t, h, "early/", 5, time.Second)
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		require.Empty(t, early.reports())

		resumed := runChanges(t, h, "quiet/", 1, time.Second)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []int64{5}, resumed.reports(), "current to the head, from revision 1")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		require.Equal(t, []int64{5}, resumed.reports())
	})
}

// A watch that delivered events is woken at a tick after them (its
// emitter then drops the report or sends the head), at most once a tick,
// and its clock stops when the last watch on it ends.
func TestWatchChangesAfterEventsAndClockRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeHistory{oldest: 1}
		h := NewHub(f, 10)
		w := runChanges(t, h, "k", 0, time.Second)
		synctest.Wait()
		for range 20 {
			h.Publish([]storage.Revision{f.add("k")})
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		got := w.reports()
		require.NotEmpty(t, got)
		require.LessOrEqual(t, len(got), 5, "at most one a tick over 5 s")
		require.Equal(t, int64(20), got[len(got)-1], "the last report is the head")

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.WatchChanges(ctx, "other/", 0, 2*time.Second, &counter{}) }()
		synctest.Wait()
		h.clocks.mu.Lock()
		require.Len(t, h.clocks.by, 2, "one clock per interval")
		h.clocks.mu.Unlock()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		h.clocks.mu.Lock()
		require.Len(t, h.clocks.by, 1, "the 2 s clock stopped with its last watch")
		h.clocks.mu.Unlock()
	})
}
