package watch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
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

// A window holds exactly the newest whole revisions that fit in its
// capacity, however big the revisions, within a ring no bigger than the
// capacity rounded up; and a watch copies out at least its batch, ending
// on a whole revision. The copies are the watch's own: the window moving
// on never changes them.
func TestWindowKeepsTheNewestWholeRevisions(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 50 {
		capacity := 1 + rng.IntN(20)
		w := newWindow(capacity, 0)
		var all []item // every item pushed, oldest first
		type copied struct{ got, then []item }
		var copies []copied
		for rev := int64(1); rev <= 300; rev++ {
			size := 1 + rng.IntN(4)
			if rng.IntN(20) == 0 {
				size = capacity + rng.IntN(3) // sometimes too big to keep
			}
			for i := range size {
				if i > 0 {
					w.last().end = false
					all[len(all)-1].end = false
				}
				w.push(item{rev: rev, end: true})
				all = append(all, item{rev: rev, end: true})
			}
			w.endRevision()

			// The model: whole revisions from the newest back, while they fit.
			keep := len(all)
			for keep > 0 {
				r, j := all[keep-1].rev, keep
				for j > 0 && all[j-1].rev == r {
					j--
				}
				if len(all)-j > capacity {
					break
				}
				keep = j
			}
			want := all[keep:]
			var got []item
			for i := range w.len() {
				got = append(got, *w.at(i))
			}
			require.Equal(t, len(want), len(got), "capacity %d, revision %d", capacity, rev)
			if len(want) > 0 {
				require.Equal(t, want, got)
			}
			if keep > 0 {
				require.Equal(t, all[keep-1].rev, w.start, "the window starts after the last revision it forgot")
			}
			require.LessOrEqual(t, len(w.buf), ceilPow2(capacity))

			from, limit := rev-int64(rng.IntN(6)), 1+rng.IntN(5)
			c := w.copyAfter(from, nil, limit)
			var after []item
			for _, it := range want {
				if it.rev > from {
					after = append(after, it)
				}
			}
			n := 0
			for n < len(after) && (n < limit || !after[n-1].end) {
				n++
			}
			if n > 0 {
				require.Equal(t, after[:n], c, "from %d, batch %d", from, limit)
			} else {
				require.Empty(t, c)
			}
			copies = append(copies, copied{got: c, then: slices.Clone(c)})
		}
		for _, c := range copies {
			require.Equal(t, c.then, c.got, "a copy handed out never changes")
		}
	}
}

// gatedEmitter holds its first event until the gate opens, then records.
type gatedEmitter struct {
	entered chan struct{} // closed on the first event
	gate    chan struct{} // closed by the test to let it go on
	revs    chan int64
}

func (g *gatedEmitter) Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error {
	select {
	case <-g.entered:
	default:
		close(g.entered)
		<-g.gate
	}
	g.revs <- rev
	return nil
}

func (g *gatedEmitter) Progress(ctx context.Context, rev int64) error { return nil }

// A watch that stops in the middle of what it read from a full window,
// while the publisher replaces that window many times over, goes on with
// exactly the events it had, then the rest from the history: it never
// delivers what the window was overwritten with.
func TestStuckWatchResumesExactlyAfterItsWindowWasOverwritten(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 8)
	h.join("k")    // the group, and its window, outlive the watch's start
	for range 20 { // the window has moved on already, and is full
		h.Publish([]storage.Revision{f.add("k")})
	}
	e := &gatedEmitter{entered: make(chan struct{}), gate: make(chan struct{}), revs: make(chan int64, 200)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Watch(ctx, "k", 12, 0, e, nil) }()
	<-e.entered
	for range 100 {
		h.Publish([]storage.Revision{f.add("k")})
	}
	close(e.gate)
	for want := int64(13); want <= 120; want++ {
		select {
		case got := <-e.revs:
			require.Equal(t, want, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("revision %d never delivered", want)
		}
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
