package client

import (
	"testing"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
)

func newTestDownstream() (*downstream, *spi.Stream[spi.Event]) {
	s := spi.NewStream[spi.Event](4, func() {}, func(e spi.Event) spi.Event { return e })
	d := &downstream{w: s, maxLag: 100, wake: make(chan struct{}, 1), kill: make(chan struct{})}
	return d, s
}

// A report nobody asked for, to an idle watcher, moves LastRev at once
// and does not wake its goroutine.
func TestUnaskedProgressToAnIdleWatcherMovesLastRevOnly(t *testing.T) {
	d, s := newTestDownstream()
	d.push(dsItem{rev: 7, progress: true}, 7)
	if got := s.LastRev(); got != 7 {
		t.Fatalf("LastRev %d after a report at 7", got)
	}
	if len(d.queue) != 0 || len(d.wake) != 0 {
		t.Fatalf("queued %d, woken %d: the report should not reach the goroutine", len(d.queue), len(d.wake))
	}
	d.push(dsItem{rev: 5, progress: true}, 7)
	if got := s.LastRev(); got != 7 {
		t.Fatalf("LastRev went back to %d on an older report", got)
	}
}

// While an event is queued or being delivered, a report waits its turn
// behind it: LastRev never passes an event the consumer has not had.
func TestUnaskedProgressWaitsBehindEvents(t *testing.T) {
	d, s := newTestDownstream()
	ev := []clientwire.Event{{Type: clientwire.EventPut, KV: command.KV{Key: "k", ModRev: 3}, EndOfRev: true}}
	d.push(dsItem{rev: 3, events: ev}, 3)
	d.push(dsItem{rev: 9, progress: true}, 9)
	if got := s.LastRev(); got != 0 {
		t.Fatalf("LastRev %d with revision 3 still queued", got)
	}
	if _, ok, _ := d.pop(); !ok { // the event, now being delivered
		t.Fatal("nothing queued")
	}
	if _, ok, _ := d.pop(); !ok { // the report, queued behind it
		t.Fatal("the report was not queued behind the event")
	}
	d.push(dsItem{rev: 11, progress: true}, 11) // run has not come back: still busy
	if got := s.LastRev(); got != 0 || len(d.queue) != 1 {
		t.Fatalf("LastRev %d, queued %d while the watcher delivers: the report must queue", got, len(d.queue))
	}
	d.queue = nil
	if _, ok, _ := d.pop(); ok { // run comes back: idle
		t.Fatal("queue not empty")
	}
	d.push(dsItem{rev: 12, progress: true}, 12)
	if got := s.LastRev(); got != 12 {
		t.Fatalf("LastRev %d once idle again", got)
	}
}
