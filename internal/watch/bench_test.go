package watch

import (
	"context"
	"fmt"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
)

// benchEvents is a pool of events the benchmarks publish, so a published
// revision costs the benchmark no allocation of its own.
func benchEvents(n int) []storage.Event {
	evs := make([]storage.Event, n)
	for i := range evs {
		evs[i] = storage.Event{Type: storage.EventPut, KV: command.KV{Key: fmt.Sprintf("k/%d", i%64)}}
	}
	return evs
}

// BenchmarkPublish measures publishing one-event revisions to a hub with
// one watched group whose window is full (the steady state of a busy
// prefix), in batches of 1 and of 64 revisions.
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			f := &fakeHistory{oldest: 1}
			h := NewHub(f, 4096)
			h.join("k/")
			evs := benchEvents(8192)
			revs := make([]storage.Revision, batch)
			rev := int64(0)
			publish := func() {
				for i := range revs {
					rev++
					revs[i] = storage.Revision{Rev: rev, Events: evs[rev%int64(len(evs)):][:1]}
				}
				h.Publish(revs)
			}
			for range 2 * 4096 / batch { // fill the window
				publish()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				publish()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/rev")
		})
	}
}

// countEmitter counts events and stops its watch after want of them.
type countEmitter struct {
	n, want int
	cancel  context.CancelFunc
}

func (c *countEmitter) Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error {
	if c.n++; c.n == c.want {
		c.cancel()
	}
	return nil
}

func (c *countEmitter) Progress(ctx context.Context, rev int64) error { return nil }

// BenchmarkWatchFromWindow measures one watcher reading a full window
// (4,096 events) from memory.
func BenchmarkWatchFromWindow(b *testing.B) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 4096)
	h.join("k/") // keeps the group, and its window, between watches
	evs := benchEvents(4096)
	revs := make([]storage.Revision, len(evs))
	for i := range revs {
		revs[i] = storage.Revision{Rev: int64(i + 1), Events: evs[i : i+1]}
	}
	h.Publish(revs)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		e := &countEmitter{want: len(evs), cancel: cancel}
		_ = h.Watch(ctx, "k/", 0, 0, e, nil)
		cancel()
		if e.n != len(evs) {
			b.Fatalf("delivered %d events, want %d", e.n, len(evs))
		}
	}
}
