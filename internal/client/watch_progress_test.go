package client

import (
	"context"
	"testing"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
)

// newTestDownstream returns a downstream whose deliveries are not run,
// only counted in *spawned.
func newTestDownstream() (*downstream, *spi.Stream[spi.Event], *int) {
	s := spi.NewStream[spi.Event](4, func() {}, func(e spi.Event) spi.Event { return e })
	spawned := new(int)
	d := &downstream{w: s, maxLag: 100, kill: make(chan struct{}), ctx: context.Background()}
	d.spawn = func() { *spawned++ }
	return d, s, spawned
}

// A report nobody asked for, to an idle watcher, moves LastRev at once
// and starts no delivery.
func TestUnaskedProgressToAnIdleWatcherMovesLastRevOnly(t *testing.T) {
	d, s, spawned := newTestDownstream()
	d.push(dsItem{rev: 7, progress: true}, 7)
	if got := s.LastRev(); got != 7 {
		t.Fatalf("LastRev %d after a report at 7", got)
	}
	if len(d.queue) != 0 || *spawned != 0 {
		t.Fatalf("queued %d, deliveries started %d: the report should start none", len(d.queue), *spawned)
	}
	d.push(dsItem{rev: 5, progress: true}, 7)
	if got := s.LastRev(); got != 7 {
		t.Fatalf("LastRev went back to %d on an older report", got)
	}
}

// While an event is queued or being delivered, a report waits its turn
// behind it: LastRev never passes an event the consumer has not had.
func TestUnaskedProgressWaitsBehindEvents(t *testing.T) {
	d, s, spawned := newTestDownstream()
	ev := []clientwire.Event{{Type: clientwire.EventPut, KV: command.KV{Key: "k", ModRev: 3}, EndOfRev: true}}
	d.push(dsItem{rev: 3, events: ev}, 3)
	d.push(dsItem{rev: 9, progress: true}, 9)
	if got := s.LastRev(); got != 0 {
		t.Fatalf("LastRev %d with revision 3 still queued", got)
	}
	if *spawned != 1 {
		t.Fatalf("%d deliveries started for two items: want one, running until both are out", *spawned)
	}
	if _, ok, _, _ := d.next(nil); !ok { // the event, now being delivered
		t.Fatal("nothing queued")
	}
	if _, ok, _, _ := d.next(nil); !ok { // the report, queued behind it
		t.Fatal("the report was not queued behind the event")
	}
	d.push(dsItem{rev: 11, progress: true}, 11) // the delivery has not come back: still busy
	if got := s.LastRev(); got != 0 || len(d.queue) != 1 {
		t.Fatalf("LastRev %d, queued %d while the watcher delivers: the report must queue", got, len(d.queue))
	}
	d.queue = nil
	if _, ok, quiet, err := d.next(nil); ok || quiet || err != nil { // the delivery comes back: idle, and ends
		t.Fatal("queue not empty")
	}
	if d.running {
		t.Fatal("the delivery found nothing to do and still counts as running")
	}
	d.push(dsItem{rev: 12, progress: true}, 12)
	if got := s.LastRev(); got != 12 {
		t.Fatalf("LastRev %d once idle again", got)
	}
	if *spawned != 1 {
		t.Fatalf("%d deliveries started: a report to an idle watcher must start none", *spawned)
	}
	d.push(dsItem{rev: 13, events: ev}, 13)
	if *spawned != 2 {
		t.Fatalf("%d deliveries started: a revision to an idle watcher must start one", *spawned)
	}
}
