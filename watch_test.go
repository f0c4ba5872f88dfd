package coord_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

func nextEvent(t *testing.T, w *coord.Watcher) coord.Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		require.True(t, ok, "watch ended: %v", w.Err())
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
		return coord.Event{}
	}
}

func TestWatchPrevKVAndFilters(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(0)
	start, err := n.Put(ctx, "f/a", []byte("1"))
	require.NoError(t, err)
	_, err = n.Put(ctx, "f/a", []byte("2"))
	require.NoError(t, err)
	_, err = n.Delete(ctx, "f/a")
	require.NoError(t, err)

	all := c.Node(1).Watch(ctx, "f/", coord.FromRev(start.ModRev), coord.WithPrevKV())
	put := nextEvent(t, all)
	require.Equal(t, "2", string(put.KV.Value))
	require.Equal(t, "1", string(put.PrevKV.Value))
	del := nextEvent(t, all)
	require.Equal(t, coord.EventDelete, del.Type)
	require.Nil(t, del.KV.Value)
	require.Equal(t, "2", string(del.PrevKV.Value))

	plain := c.Node(1).Watch(ctx, "f/", coord.FromRev(start.ModRev))
	require.Nil(t, nextEvent(t, plain).PrevKV, "no previous state unless asked for")

	dels := c.Node(2).Watch(ctx, "f/", coord.FromRev(0), coord.DeletesOnly())
	ev := nextEvent(t, dels)
	require.Equal(t, coord.EventDelete, ev.Type)
	require.Equal(t, del.Rev, ev.Rev)
	puts := c.Node(2).Watch(ctx, "f/", coord.FromRev(0), coord.PutsOnly())
	require.Equal(t, start.ModRev, nextEvent(t, puts).Rev)
	require.Equal(t, put.Rev, nextEvent(t, puts).Rev)
}

func TestWatchDeliversARevisionTogether(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(0)
	s, err := n.NewSession(ctx, coord.WithTTL(time.Second))
	require.NoError(t, err)
	res, err := n.Txn(ctx).Then(coord.OpPut("b/1", nil, coord.Ephemeral(s)), coord.OpPut("b/2", nil, coord.Ephemeral(s)),
		coord.OpPut("elsewhere", nil), coord.OpPut("b/3", nil, coord.Ephemeral(s))).Commit()
	require.NoError(t, err)
	w := c.Node(2).Watch(ctx, "b/", coord.FromRev(res.Rev-1))
	for i, key := range []string{"b/1", "b/2", "b/3"} {
		ev := nextEvent(t, w)
		require.Equal(t, key, ev.KV.Key)
		require.Equal(t, res.Rev, ev.Rev)
		require.Equal(t, i == 2, ev.EndOfRev, "EndOfRev closes the transaction's batch")
	}
	require.NoError(t, s.Close(ctx))
	var rev int64
	for i := range 3 {
		ev := nextEvent(t, w)
		require.Equal(t, coord.EventDelete, ev.Type)
		if i == 0 {
			rev = ev.Rev
		}
		require.Equal(t, rev, ev.Rev, "a session's end is one revision")
		require.Equal(t, i == 2, ev.EndOfRev)
	}
}

func TestWatchProgressNotify(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(1)
	w := n.Watch(ctx, "quiet/", coord.WithProgressNotify(50*time.Millisecond))
	kv, err := c.Node(0).Put(ctx, "busy", []byte("x"))
	require.NoError(t, err)
	for {
		ev := nextEvent(t, w)
		require.Equal(t, coord.EventProgress, ev.Type, "nothing changed under the prefix")
		if ev.Rev >= kv.ModRev {
			break // current past a change elsewhere: not stale
		}
	}
	on := n.Watch(ctx, "quiet/")
	on.RequestProgress()
	ev := nextEvent(t, on)
	require.Equal(t, coord.EventProgress, ev.Type)
	require.GreaterOrEqual(t, ev.Rev, int64(0))
}

func TestSlowWatcherEndsAndResumesWithoutGapOrRepeat(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	ctx := ctxT(t, 30*time.Second)
	n := c.Node(0)
	w := n.Watch(ctx, "s/", coord.WithMaxLag(20))
	// Never read: the buffer fills, then the watch falls behind.
	var last int64
	for i := 0; ; i++ {
		kv, err := n.Put(ctx, fmt.Sprintf("s/%d", i), nil)
		require.NoError(t, err)
		last = kv.ModRev
		if w.Err() != nil {
			break
		}
		require.Less(t, i, 5000, "the slow watcher was never ended")
	}
	var seen []int64
	for ev := range w.Events() {
		seen = append(seen, ev.Rev)
	}
	var slow *coord.SlowWatcherError
	require.True(t, errors.As(w.Err(), &slow), "got %v", w.Err())
	require.ErrorIs(t, w.Err(), coord.ErrSlowWatcher)
	require.Equal(t, seen[len(seen)-1], slow.LastRev, "LastRev is the last revision delivered")
	require.Equal(t, slow.LastRev, w.LastRev())

	resumed := n.Watch(ctx, "s/", coord.FromRev(slow.LastRev))
	for rev := slow.LastRev + 1; rev <= last; rev++ {
		require.Equal(t, rev, nextEvent(t, resumed).Rev)
	}
}

func TestStuckWatchersDoNotSlowWrites(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	ctx := ctxT(t, 60*time.Second)
	n := c.Node(0)
	writes := func() time.Duration {
		start := time.Now()
		for i := range 200 {
			_, err := n.Put(ctx, fmt.Sprintf("hot/%d", i%10), []byte("v"))
			require.NoError(t, err)
		}
		return time.Since(start)
	}
	base := writes()
	for range 1000 {
		n.Watch(ctx, "hot/", coord.WithMaxLag(0)) // never read, never ended for lag
	}
	// A design that pushed events to watchers from the apply loop would
	// stall here once their buffers filled; ctx would end the test. The
	// speed itself is measured by BenchmarkPutWithStuckWatchers.
	loaded := writes()
	t.Logf("200 puts: %v without watchers, %v with 1,000 stuck ones", base, loaded)
}

// A ListWatch whose consumer stalls while the prefix changes far past
// what the member keeps (its history and its in-memory window) lists
// again and converges on the cell. Whether the watch ends for lagging (a
// check that runs on a timer) or, once the consumer resumes, for needing
// compacted revisions, depends on timing; that it ends does not: the
// stall spans more than twice the hub's window of events (4,096 per
// prefix), so even a watch that read a full window just before stalling
// resumes behind both the window and the history.
func TestListWatchResumesAcrossCompaction(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(i int, cfg *coord.Config) {
			cfg.HistoryRevisions = 20
		}))
		ctx := ctxT(t, 60*time.Second)
		writer, reader := c.Node(0), c.Node(1)
		var mirror sync.Map
		var lists atomic.Int32
		var stalled sync.Mutex // held by the test to stall the consumer
		lwCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- reader.ListWatch(lwCtx, "m/", func(kvs []coord.KV, rev int64) error {
				lists.Add(1)
				mirror.Clear()
				for _, kv := range kvs {
					mirror.Store(kv.Key, string(kv.Value))
				}
				return nil
			}, func(ev coord.Event) error {
				stalled.Lock()
				defer stalled.Unlock()
				if ev.Type == coord.EventDelete {
					mirror.Delete(ev.KV.Key)
				} else {
					mirror.Store(ev.KV.Key, string(ev.KV.Value))
				}
				return nil
			}, coord.WithMaxLag(10))
		}()
		require.Eventually(t, func() bool { return lists.Load() == 1 }, 5*time.Second, time.Millisecond)
		const seed1, seed2 = 1, 2
		t.Logf("seed %d,%d", seed1, seed2)
		rng := rand.New(rand.NewPCG(seed1, seed2))
		want := map[string]string{}
		// writeTxns writes transactions of 100 random puts and deletes under
		// m/ until they have made at least events events.
		writeTxns := func(events int) {
			for made := 0; made < events; {
				var ops []coord.Op
				for k := range 100 {
					key := fmt.Sprintf("m/%d", k)
					if rng.IntN(4) == 0 {
						if _, ok := want[key]; ok {
							made++ // an event only if the key was there
						}
						ops = append(ops, coord.OpDelete(key))
						delete(want, key)
					} else {
						v := fmt.Sprint(rng.Int())
						ops = append(ops, coord.OpPut(key, []byte(v)))
						want[key] = v
						made++
					}
				}
				_, err := writer.Txn(ctx).Then(ops...).Commit()
				require.NoError(t, err)
			}
		}
		write := func(count int) {
			for range count {
				k := fmt.Sprintf("m/%d", rng.IntN(15))
				if rng.IntN(4) == 0 {
					_, err := writer.Delete(ctx, k)
					require.NoError(t, err)
					delete(want, k)
				} else {
					v := fmt.Sprint(rng.Int())
					_, err := writer.Put(ctx, k, []byte(v))
					require.NoError(t, err)
					want[k] = v
				}
			}
		}
		stalled.Lock()
		writeTxns(2*4096 + 256) // a revision's events are kept or dropped together: up to 100 more
		stalled.Unlock()
		write(50)
		require.Eventually(t, func() bool {
			got := map[string]string{}
			mirror.Range(func(k, v any) bool { got[k.(string)] = v.(string); return true })
			return fmt.Sprint(got) == fmt.Sprint(want)
		}, 30*time.Second, 10*time.Millisecond, "the mirror converges on the cell")
		require.Greater(t, lists.Load(), int32(1), "the stalled consumer was resynced by a new listing")
		stop()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}

// TestWatchReady: Ready closes once the watch is established, on a quiet
// prefix too; the watch's own request for that is never delivered (the
// first event is the first change); a watch refused at the start has
// Ready closed and says why.
func TestWatchReady(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	n := c.Node(1)
	w := n.Watch(ctx, "ready/")
	recv(t, ctx, w.Ready())
	require.NoError(t, w.Err())
	kv, err := c.Node(0).Put(ctx, "ready/a", []byte("1"))
	require.NoError(t, err)
	ev := nextEvent(t, w)
	require.Equal(t, coord.EventPut, ev.Type, "the first event is the change, not a progress report")
	require.Equal(t, kv.ModRev, ev.Rev)

	// From a past revision, with changes to deliver: Ready closes too.
	past := n.Watch(ctx, "ready/", coord.FromRev(kv.ModRev-1))
	recv(t, ctx, past.Ready())
	require.Equal(t, kv.ModRev, nextEvent(t, past).Rev)

	bad := n.Watch(ctx, "ready/", coord.FromRev(-1))
	recv(t, ctx, bad.Ready())
	require.ErrorIs(t, bad.Err(), coord.ErrInvalidArgument)
}

// TestWatchRequestProgressWithoutNotify: RequestProgress on a watch
// without WithProgressNotify reports progress current past a change made
// elsewhere, also when asked before the watch was established.
func TestWatchRequestProgressWithoutNotify(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	n := c.Node(2)
	early := n.Watch(ctx, "progress/")
	early.RequestProgress()
	ev := nextEvent(t, early)
	require.Equal(t, coord.EventProgress, ev.Type)

	w := n.Watch(ctx, "progress/")
	recv(t, ctx, w.Ready())
	kv, err := c.Node(0).Put(ctx, "elsewhere", []byte("x"))
	require.NoError(t, err)
	for {
		w.RequestProgress()
		ev := nextEvent(t, w)
		require.Equal(t, coord.EventProgress, ev.Type, "nothing changed under the prefix")
		if ev.Rev >= kv.ModRev {
			break // this member has applied the change elsewhere
		}
	}
}

// A quiet watch on a member keeps no goroutine waiting: 200 of them
// cost the process none, each still gets its events, and RequestProgress
// reaches one that waits. Not parallel: it counts the process's
// goroutines.
func TestQuietWatchesHoldNoGoroutine(t *testing.T) {
	c := coordtest.NewCluster(t, 3)
	l := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g0 := runtime.NumGoroutine()
	const n = 200
	ws := openQuietWatches(ctx, n, func(ctx context.Context, prefix string) *coord.Watcher { return l.Watch(ctx, prefix) })
	waitGoroutines(t, "held", func(g int) bool { return g-g0 <= n/10 })
	for i := 0; i < n; i += 20 {
		r, err := l.Put(ctx, fmt.Sprintf("quiet/%03d/k", i), []byte("v"))
		require.NoError(t, err)
		ev := clientEvent(t, ws[i])
		require.Equal(t, coord.EventPut, ev.Type)
		require.Equal(t, r.ModRev, ev.Rev)
	}
	ws[1].RequestProgress()
	ev := clientEvent(t, ws[1])
	require.Equal(t, coord.EventProgress, ev.Type)
	waitGoroutines(t, "after the deliveries", func(g int) bool { return g-g0 <= n/10 })
	for _, w := range ws {
		w.Close()
	}
	for _, w := range ws {
		for range w.Events() {
		}
	}
}
