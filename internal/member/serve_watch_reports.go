package member

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/watch"
)

// connReports tells a client, in one frame an election timeout, which of
// its watches on this connection are current to the head (clients of
// protocol version 7 and later; see clientwire.WatchesCurrent). The
// watches themselves then wake only for their events: an idle watch
// costs the member nothing while the cell is written, where a report
// of its own woke its goroutine and sent a frame every interval.
type connReports struct {
	mu      sync.Mutex
	rep     *clientwire.ConnReporter
	watches map[uint64]*reported
	running bool
	wg      sync.WaitGroup

	// The tick's scratch, reused: under mu.
	ids   []uint64
	ps    []*watch.Position
	ready []int
	told  []uint64
}

// reported is one watch's position, and the head it was last told.
type reported struct {
	pos  *watch.Position
	told int64
}

// add starts reporting watch id (its position pos) on rep's connection,
// until remove; the first add starts the reports, which run until ctx
// (the connection's) ends.
func (r *connReports) add(ctx context.Context, rep *clientwire.ConnReporter, id uint64, pos *watch.Position, hub *watch.Hub, every time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watches == nil {
		r.watches = make(map[uint64]*reported)
	}
	r.watches[id] = &reported{pos: pos}
	if r.running {
		return
	}
	r.running, r.rep = true, rep
	r.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r.report(hub)
		}
	})
}

func (r *connReports) remove(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.watches, id)
}

// wait waits for the reports to stop, once the connection's context has
// ended.
func (r *connReports) wait() { r.wg.Wait() }

// report sends one WatchesCurrent of the watches current to the head and
// not yet told it. A watch told is not told again until the head moves:
// a cell at rest sends nothing.
func (r *connReports) report(hub *watch.Hub) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = r.ids[:0]
	for id := range r.watches {
		r.ids = append(r.ids, id)
	}
	slices.Sort(r.ids) // the frame lists them ascending
	r.ps = r.ps[:0]
	for _, id := range r.ids {
		r.ps = append(r.ps, r.watches[id].pos)
	}
	var head int64
	head, r.ready = hub.Current(r.ps, r.ready[:0])
	r.told = r.told[:0]
	for _, i := range r.ready {
		if r.watches[r.ids[i]].told < head {
			r.told = append(r.told, r.ids[i])
		}
	}
	if len(r.told) == 0 {
		return
	}
	if r.rep.WatchesCurrent(head, r.told) != nil {
		return // not queued (the connection ends, or its queue is full): the next tick says it again
	}
	for _, id := range r.told {
		r.watches[id].told = head
	}
}
