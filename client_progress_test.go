package coord_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/coordcell/coord"
)

// clientEvent reads one event from w, failing the test if the watch
// ends or nothing arrives in time (generous: a loaded machine).
func clientEvent(t *testing.T, w *coord.Watcher) coord.Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event in 30s")
	}
	return coord.Event{}
}

// TestClientWatchRequestProgress: RequestProgress on a client's watch
// is answered by one EventProgress, to the watcher that asked only,
// after every change it was sent before it and at a revision at least
// its member's when it asked (changes outside the prefix included), also
// when the watcher shares its upstream with a watcher of a wider prefix.
func TestClientWatchRequestProgress(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	outer := cl.Watch(ctx, "p/")
	inner := cl.Watch(ctx, "p/in/")
	if n := coord.ClientUpstreams(cl); n != 1 {
		t.Fatalf("%d upstream watches for nested prefixes, want 1", n)
	}
	<-outer.Ready()
	<-inner.Ready()

	for round := range 3 {
		// Changes under both prefixes, then elsewhere: the answer must
		// cover the latter too, though no event of the watch names it
		// (written through the client, so its member has applied it: the
		// answer is at the member's revision when asked).
		if _, err := cl.Put(ctx, fmt.Sprintf("p/in/k%d", round), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Put(ctx, fmt.Sprintf("p/out%d", round), []byte("v")); err != nil {
			t.Fatal(err)
		}
		other, err := cl.Put(ctx, fmt.Sprintf("elsewhere/%d", round), []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		inner.RequestProgress()
		inner.RequestProgress() // a second ask before the answer is the same ask

		var delivered int64
		for {
			ev := clientEvent(t, inner)
			if ev.Type == coord.EventProgress {
				if ev.Rev < delivered {
					t.Fatalf("round %d: progress at %d after an event at %d", round, ev.Rev, delivered)
				}
				if ev.Rev < other.ModRev {
					t.Fatalf("round %d: progress at %d, below the revision %d written before asking", round, ev.Rev, other.ModRev)
				}
				break
			}
			delivered = ev.Rev
		}
		if delivered == 0 {
			t.Fatalf("round %d: the progress came before the watcher's own change", round)
		}
		// The outer watcher, which did not ask, gets its two changes and
		// no progress report.
		for range 2 {
			if ev := clientEvent(t, outer); ev.Type == coord.EventProgress {
				t.Fatalf("round %d: the watcher that did not ask got a progress report at %d", round, ev.Rev)
			}
		}
	}

	// Exactly once: a change after the answers arrives next on both, no
	// second progress report in between.
	kv, err := cl.Put(ctx, "p/in/last", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*coord.Watcher{inner, outer} {
		if ev := clientEvent(t, w); ev.Type != coord.EventPut || ev.Rev != kv.ModRev {
			t.Fatalf("after the answers: %+v, want the put at %d", ev, kv.ModRev)
		}
	}

	// The outer watcher asks in turn: only it is answered.
	outer.RequestProgress()
	if ev := clientEvent(t, outer); ev.Type != coord.EventProgress || ev.Rev < kv.ModRev {
		t.Fatalf("outer's answer: %+v, want a progress at %d or later", ev, kv.ModRev)
	}
	kv2, err := cl.Put(ctx, "p/in/after", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := clientEvent(t, inner); ev.Type != coord.EventPut || ev.Rev != kv2.ModRev {
		t.Fatalf("inner after outer asked: %+v, want the put at %d", ev, kv2.ModRev)
	}
}

// TestClientWatchRequestProgressQuiet: a watch of a prefix nothing
// changes under is answered at once with the revision it is current to,
// and after a change elsewhere with that change's revision or later.
func TestClientWatchRequestProgressQuiet(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := cl.Watch(ctx, "quiet/")
	<-w.Ready()
	w.RequestProgress()
	first := clientEvent(t, w)
	if first.Type != coord.EventProgress {
		t.Fatalf("got %+v, want a progress report", first)
	}
	kv, err := cl.Put(ctx, "loud/x", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	w.RequestProgress()
	ev := clientEvent(t, w)
	if ev.Type != coord.EventProgress || ev.Rev < kv.ModRev || ev.Rev < first.Rev {
		t.Fatalf("got %+v, want a progress at %d or later", ev, kv.ModRev)
	}
	if w.LastRev() < ev.Rev {
		t.Fatalf("LastRev %d below the progress reported at %d", w.LastRev(), ev.Rev)
	}
}

// TestClientWatchRequestProgressFailover: a progress request made while
// the client moves to another member is answered there, once, at or
// above what the watch delivered before and the client wrote since.
func TestClientWatchRequestProgressFailover(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := cl.Watch(ctx, "fp/")
	<-w.Ready()
	before, err := cl.Put(ctx, "fp/a", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := clientEvent(t, w); ev.Rev != before.ModRev {
		t.Fatalf("got %+v, want the put at %d", ev, before.ModRev)
	}
	victim := memberIndex(c, cl.Member())
	c.Crash(victim)
	w.RequestProgress()
	var after coord.KV
	for {
		after, err = cl.Put(ctx, "elsewhere/fp", []byte("v"))
		if err == nil {
			break
		}
		if !errors.Is(err, coord.ErrAmbiguous) && !errors.Is(err, coord.ErrNoQuorum) {
			t.Fatal(err)
		}
	}
	ev := clientEvent(t, w)
	if ev.Type != coord.EventProgress || ev.Rev < before.ModRev {
		t.Fatalf("got %+v, want a progress at %d or later", ev, before.ModRev)
	}
	// The answer came from whichever member; a second ask, on the new
	// member, covers the write made through it.
	w.RequestProgress()
	if ev := clientEvent(t, w); ev.Type != coord.EventProgress || ev.Rev < after.ModRev {
		t.Fatalf("got %+v, want a progress at %d or later", ev, after.ModRev)
	}
	if m := cl.Member(); m == c.Name(victim) {
		t.Fatalf("client still on %s", m)
	}
}

// TestClientManyQuietWatchesStayCurrent: a client's quiet watches learn
// they are current from their member's reports for the whole connection
// (protocol 7): each answers RequestProgress at or past a change made
// elsewhere, and a watch that also had an event gets the event before any
// progress that covers it.
func TestClientManyQuietWatchesStayCurrent(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 200
	ws := make([]*coord.Watcher, n)
	for i := range ws {
		ws[i] = cl.Watch(ctx, fmt.Sprintf("q/%03d/", i))
	}
	for _, w := range ws {
		<-w.Ready()
	}
	if got := coord.ClientUpstreams(cl); got != n {
		t.Fatalf("%d upstream watches for %d distinct prefixes", got, n)
	}
	other, err := cl.Put(ctx, "elsewhere", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := cl.Put(ctx, "q/007/k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		w.RequestProgress()
	}
	for i, w := range ws {
		ev := clientEvent(t, w)
		if i == 7 {
			if ev.Type != coord.EventPut || ev.Rev != mine.ModRev {
				t.Fatalf("watch 7: %v at %d first, want its put at %d", ev.Type, ev.Rev, mine.ModRev)
			}
			ev = clientEvent(t, w)
		}
		if ev.Type != coord.EventProgress || ev.Rev < other.ModRev {
			t.Fatalf("watch %d: %v at %d, want progress at or past %d", i, ev.Type, ev.Rev, other.ModRev)
		}
	}
}

// A quiet watch through a client keeps no goroutine waiting, on the
// client or on the member: a delivery starts when there is something to
// deliver and ends when it is out. Not parallel: it counts the process's
// goroutines.
func TestClientQuietWatchesHoldNoGoroutine(t *testing.T) {
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g0 := runtime.NumGoroutine()
	const n = 200 // under a connection's limit of watches
	ws := openQuietWatches(ctx, n, func(ctx context.Context, prefix string) *coord.Watcher { return cl.Watch(ctx, prefix) })
	// Three a watch when the client's upstream and watcher and the
	// member's watch each kept one waiting.
	waitGoroutines(t, "held", func(g int) bool { return g-g0 <= n/10 })
	for i := 0; i < n; i += 20 {
		r, err := cl.Put(ctx, fmt.Sprintf("quiet/%03d/k", i), []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		if ev := clientEvent(t, ws[i]); ev.Type != coord.EventPut || ev.Rev != r.ModRev {
			t.Fatalf("watch %d: %v at %d, want its put at %d", i, ev.Type, ev.Rev, r.ModRev)
		}
	}
	waitGoroutines(t, "after the deliveries", func(g int) bool { return g-g0 <= n/10 })
	for _, w := range ws {
		w.Close()
	}
	for _, w := range ws {
		for range w.Events() {
		}
	}
	waitGoroutines(t, "closed", func(g int) bool { return g-g0 <= n/10 })
}

// openQuietWatches opens n watches with watch, of prefixes
// quiet/000/..., and returns them once each is Ready.
func openQuietWatches(ctx context.Context, n int, watch func(context.Context, string) *coord.Watcher) []*coord.Watcher {
	ws := make([]*coord.Watcher, n)
	for i := range ws {
		ws[i] = watch(ctx, fmt.Sprintf("quiet/%03d/", i))
	}
	for _, w := range ws {
		<-w.Ready()
	}
	return ws
}

// waitGoroutines waits for the process's goroutine count to satisfy ok.
func waitGoroutines(t *testing.T, when string, ok func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for g := runtime.NumGoroutine(); !ok(g); g = runtime.NumGoroutine() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d goroutines", when, g)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WithProgressNotify through a client: a quiet watch hears a progress
// report each interval, and after a change its event comes first, then
// reports at or past it.
func TestClientWatchProgressNotify(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := cl.Watch(ctx, "notify/", coord.WithProgressNotify(50*time.Millisecond))
	defer w.Close()
	<-w.Ready()
	for range 2 {
		if ev := clientEvent(t, w); ev.Type != coord.EventProgress {
			t.Fatalf("%v on a quiet watch, want a progress report", ev.Type)
		}
	}
	r, err := cl.Put(ctx, "notify/k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev := clientEvent(t, w)
		if ev.Type == coord.EventProgress && ev.Rev < r.ModRev {
			continue // reported before the put
		}
		if ev.Type != coord.EventPut || ev.Rev != r.ModRev {
			t.Fatalf("%v at %d, want the put at %d", ev.Type, ev.Rev, r.ModRev)
		}
		break
	}
	if ev := clientEvent(t, w); ev.Type != coord.EventProgress || ev.Rev < r.ModRev {
		t.Fatalf("%v at %d after the put, want a progress report at or past %d", ev.Type, ev.Rev, r.ModRev)
	}
}
