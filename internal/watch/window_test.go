package watch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
)

// growingHistory is a durable history that a publisher appends to while
// watchers read it, retaining the last retain revisions (0 = all).
type growingHistory struct {
	mu     sync.Mutex
	revs   []storage.Revision // revision i+1 at index i
	retain int64
}

func (g *growingHistory) append(r storage.Revision) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.revs = append(g.revs, r)
}

func (g *growingHistory) oldestLocked() int64 {
	if n := int64(len(g.revs)); g.retain > 0 && n > g.retain {
		return n - g.retain + 1
	}
	return 1
}

func (g *growingHistory) History(from int64, limit int) ([]storage.Revision, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if oldest := g.oldestLocked(); from+1 < oldest {
		return nil, fmt.Errorf("%w: oldest %d", storage.ErrCompacted, oldest)
	}
	lo := min(from, int64(len(g.revs)))
	hi := min(lo+int64(limit), int64(len(g.revs)))
	return g.revs[lo:hi:hi], nil
}

func (g *growingHistory) OldestRevision() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.oldestLocked()
}

func (g *growingHistory) Revision() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(len(g.revs))
}

// randomRevisions returns n revisions of one to three events each, under
// "p/" (sub-prefixes "p/a" and "p/b") or elsewhere.
func randomRevisions(rng *rand.Rand, n int) []storage.Revision {
	keys := []string{"p/a", "p/b", "q/x", "p/a/1"}
	revs := make([]storage.Revision, n)
	for i := range revs {
		rev := int64(i + 1)
		r := storage.Revision{Rev: rev}
		for range 1 + rng.IntN(3) {
			k := keys[rng.IntN(len(keys))]
			r.Events = append(r.Events, storage.Event{Type: storage.EventPut, KV: command.KV{Key: k, ModRev: rev}})
		}
		revs[i] = r
	}
	return revs
}

// checker is a slow Emitter that checks every delivery against the
// history: the events under its prefix after its start, each once, in
// order, a revision's last one marked.
type checker struct {
	revs   []storage.Revision
	prefix string
	last   int64 // the last complete revision delivered
	ri, ei int   // the next expected event: revs[ri].Events[ei]
	seen   int
	done   int64 // cancel once the revision done is delivered
	cancel context.CancelFunc
}

func newChecker(revs []storage.Revision, prefix string, from int64) *checker {
	c := &checker{revs: revs, prefix: prefix}
	c.resume(from)
	return c
}

// resume expects the events after revision from.
func (c *checker) resume(from int64) {
	c.last, c.ri, c.ei = from, int(from), 0
	c.skip()
}

// skip moves to the next event under the prefix.
func (c *checker) skip() {
	for c.ri < len(c.revs) {
		evs := c.revs[c.ri].Events
		for c.ei < len(evs) && !strings.HasPrefix(evs[c.ei].KV.Key, c.prefix) {
			c.ei++
		}
		if c.ei < len(evs) {
			return
		}
		c.ri, c.ei = c.ri+1, 0
	}
}

// lastUnder reports whether event ei is the last of its revision under
// the prefix.
func (c *checker) lastUnder(ri, ei int) bool {
	for _, ev := range c.revs[ri].Events[ei+1:] {
		if strings.HasPrefix(ev.KV.Key, c.prefix) {
			return false
		}
	}
	return true
}

func (c *checker) Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error {
	if c.ri >= len(c.revs) {
		return fmt.Errorf("event %d %s after the end of the history", rev, ev.KV.Key)
	}
	want := &c.revs[c.ri].Events[c.ei]
	wantEnd := c.lastUnder(c.ri, c.ei)
	if rev != c.revs[c.ri].Rev || ev != want || end != wantEnd {
		return fmt.Errorf("after revision %d got event %d %s (end %v), want %d %s (end %v): gap, repeat or torn revision",
			c.last, rev, ev.KV.Key, end, c.revs[c.ri].Rev, want.KV.Key, wantEnd)
	}
	c.seen++
	c.ei++
	if end {
		c.last = rev
		c.ri, c.ei = c.ri+1, 0
	}
	c.skip()
	// A slow consumer: it lets the publisher run ahead, past the window.
	runtime.Gosched()
	if c.done > 0 && c.last >= c.done {
		c.cancel()
	}
	return nil
}

func (c *checker) Progress(ctx context.Context, rev int64) error {
	if rev < c.last {
		return fmt.Errorf("progress to %d after revision %d was delivered", rev, c.last)
	}
	return nil
}

// lastUnderPrefix returns the revision of the last event under prefix.
func lastUnderPrefix(revs []storage.Revision, prefix string) int64 {
	for i := len(revs) - 1; i >= 0; i-- {
		for _, ev := range revs[i].Events {
			if strings.HasPrefix(ev.KV.Key, prefix) {
				return revs[i].Rev
			}
		}
	}
	return 0
}

// runSlowWatchers publishes revs (in random batches) while slow watchers
// of several prefixes, starting at several revisions, check what they
// get; on a *CompactedError a watcher resumes where it says. It returns
// how many times the watchers resumed.
func runSlowWatchers(t *testing.T, seed uint64, revs []storage.Revision, capacity int, retain int64) int {
	t.Helper()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	hist := &growingHistory{retain: retain}
	h := NewHub(hist, capacity)
	type start struct {
		prefix string
		from   int64
	}
	starts := []start{{"p/", 0}, {"p/", 100}, {"p/a", 0}, {"", 0}, {"p/b", int64(len(revs) / 3)}, {"p/", int64(len(revs) / 2)}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(starts))
	resumed := make(chan int, len(starts))
	for _, s := range starts {
		wg.Go(func() {
			c := newChecker(revs, s.prefix, s.from)
			c.done = lastUnderPrefix(revs, s.prefix)
			n := 0
			defer func() { resumed <- n }()
			for c.last < c.done {
				wctx, wcancel := context.WithCancel(ctx)
				c.cancel = wcancel
				err := h.Watch(wctx, s.prefix, c.last, 0, c, nil)
				wcancel()
				var ce *CompactedError
				switch {
				case errors.As(err, &ce) && retain > 0:
					// A clean refusal: the next revision wanted is gone, and
					// the error says where to go on from.
					if ce.Oldest <= c.last+1 {
						errc <- fmt.Errorf("%s from %d: compacted, but revision %d is still retained", s.prefix, c.last, ce.Oldest)
						return
					}
					c.resume(ce.Oldest - 1)
					n++
				case errors.Is(err, context.Canceled) && c.last >= c.done:
				default:
					errc <- fmt.Errorf("%s from %d: %w", s.prefix, s.from, err)
					return
				}
			}
		})
	}
	// The publisher, as the apply loop: history first, then the hub, in
	// batches of 1 to 16 revisions.
	for i := 0; i < len(revs); {
		n := min(1+rng.IntN(16), len(revs)-i)
		for _, r := range revs[i : i+n] {
			hist.append(r)
		}
		h.Publish(revs[i : i+n : i+n])
		i += n
	}
	wg.Wait()
	close(errc)
	close(resumed)
	for err := range errc {
		require.NoError(t, err)
	}
	total := 0
	for n := range resumed {
		total += n
	}
	return total
}

// Slow watchers of a busy prefix fall out of its in-memory window while
// the publisher moves it on: each still sees exactly the history after
// its start, in order, whether served from the window, from the history,
// or from both in turn. Run it with -race: a watcher must never read
// memory that a publisher may move.
func TestSlowWatchersPastTheWindowSeeEveryEventOnce(t *testing.T) {
	for _, capacity := range []int{5, 256} {
		t.Run(fmt.Sprintf("window=%d", capacity), func(t *testing.T) {
			seed := rand.Uint64()
			revs := randomRevisions(rand.New(rand.NewPCG(seed, 1)), 20000)
			runSlowWatchers(t, seed, revs, capacity, 0)
		})
	}
}

// With a history that forgets old revisions, a watcher that falls behind
// it gets a *CompactedError naming the oldest revision left, never a gap:
// resumed from there it again sees every event, in order.
func TestSlowWatchersBehindTheHistoryAreToldWhereToResume(t *testing.T) {
	seed := rand.Uint64()
	revs := randomRevisions(rand.New(rand.NewPCG(seed, 1)), 20000)
	resumed := runSlowWatchers(t, seed, revs, 256, 512)
	t.Logf("%d resumptions after compaction", resumed)
}

// The recent revisions are a ring: oldest first across the wrap, within
// both bounds, and forgetting a revision clears its slot.
func TestRecentRingKeepsTheNewestInOrder(t *testing.T) {
	var q recentRing
	for rev := int64(1); rev <= 3*recentRevisions+7; rev++ {
		q.push(storage.Revision{Rev: rev, Events: []storage.Event{{KV: command.KV{Key: "k", Value: []byte("v")}}}})
		require.Equal(t, min(rev, recentRevisions), int64(q.len()))
		require.Equal(t, rev, q.at(q.len()-1).Rev, "the newest is last")
		require.Equal(t, rev-int64(q.len())+1, q.at(0).Rev, "no gap from the oldest to the newest")
	}
	require.Equal(t, recentRevisions*2, q.bytes)
	for i := range q.len() - 1 {
		require.Equal(t, q.at(i).Rev+1, q.at(i+1).Rev)
	}

	big := make([]byte, recentMaxBytes/3)
	for rev := int64(1000); rev < 1010; rev++ {
		q.push(storage.Revision{Rev: rev, Events: []storage.Event{{KV: command.KV{Key: "b", Value: big}}}})
		require.LessOrEqual(t, q.bytes, recentMaxBytes)
		require.Equal(t, rev, q.at(q.len()-1).Rev)
	}
	require.Equal(t, 2, q.len(), "two thirds of the byte bound, with the small revisions' bytes gone too")
	pinned := 0
	for _, r := range q.buf {
		if r.Events != nil {
			pinned++
		}
	}
	require.Equal(t, q.len(), pinned, "forgotten revisions' slots pin nothing")

	q.reset()
	require.Zero(t, q.len())
	require.Zero(t, q.bytes)
	q.push(storage.Revision{Rev: 5})
	require.Equal(t, int64(5), q.at(0).Rev)
}

// A window hands out slices of its segments that nothing writes again:
// what a reader was given reads the same after the window has moved far
// past it, and the window always holds exactly the newest items, whole
// revisions served across segment boundaries.
func TestWindowNeverChangesWhatItHandedOut(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const capacity, limit = 20, 8
	var w window
	type handed struct {
		batches [][]item
		then    []item // what they held when handed out
	}
	var given []handed
	var all []item // every item pushed, oldest first
	rev := int64(0)
	for range 2000 {
		rev++
		for i := range 1 + rng.IntN(3) {
			if i > 0 {
				w.last().end = false
				all[len(all)-1].end = false
			}
			it := item{rev: rev, end: true}
			w.push(it, limit)
			all = append(all, it)
		}
		if over := w.len() - capacity; over > 0 {
			w.drop(over)
		}
		require.Equal(t, all[len(all)-w.len():], flatten(w.after(0, nil)), "the newest items, in order")
		require.LessOrEqual(t, len(w.segs), capacity/minSegment+2)

		from := rev - int64(rng.IntN(8))
		b := w.after(from, nil)
		got := flatten(b)
		var want []item
		for _, it := range all[len(all)-w.len():] {
			if it.rev > from {
				want = append(want, it)
			}
		}
		require.Equal(t, want, got, "after %d", from)
		for _, x := range b {
			require.Equal(t, len(x), cap(x), "nothing appended later is within reach")
		}
		given = append(given, handed{batches: b, then: got})
	}
	for _, g := range given {
		require.Equal(t, g.then, flatten(g.batches), "a handed-out slice never changes")
	}
}

func flatten(batches [][]item) []item {
	var out []item
	for _, b := range batches {
		out = append(out, b...)
	}
	return out
}
