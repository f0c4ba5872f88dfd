// Package watch serves prefix watches from a member's applied state.
//
// The change history in storage is the source of truth: a watcher reads
// the revisions after the last one it delivered, so it can never skip or
// repeat one, whatever the member goes through (restart, snapshot
// install). To make that cheap the hub keeps, per distinct watched
// prefix (a group), the recent events under it in memory. Publishing a
// revision costs one map lookup per prefix of each changed key, however
// many watchers there are, and wakes only the groups whose prefix
// matched; a watcher that keeps up never reads Pebble, and one that falls
// behind the in-memory window reads the history instead. A watcher
// copies what it delivers out of a window under the lock, a bounded batch
// at a time: the windows are the hub's alone, so a publish may overwrite
// them at once, and a watcher that stops reading holds one batch at most.
// A new group starts with the events under its prefix among the last few
// hundred revisions, so a new watch from a revision just behind the head
// reads no Pebble either. The apply loop never waits for a watcher.
package watch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/storage"
)

// History is the durable change history the hub falls back to.
type History interface {
	History(fromRev int64, limit int) ([]storage.Revision, error)
	OldestRevision() int64
	Revision() int64
}

// CompactedError and SlowError are spi's, so that every backend ends a
// watch with the same values.
type (
	CompactedError = spi.CompactedError
	SlowError      = spi.SlowError
)

// group is every watcher of one prefix.
type group struct {
	prefix string
	refs   int
	win    window        // the events under prefix, up to hub.head
	wake   chan struct{} // closed and replaced when the window grows
}

// Hub fans applied revisions out to the member's watchers.
type Hub struct {
	hist     History
	capacity int // events kept per group

	mu     sync.RWMutex
	head   int64 // the last revision published
	groups map[string]*group
	// recent holds the last revisions published, whatever their keys,
	// ending at head, so a new group starts with a window rather than
	// empty: a watch from a revision just behind the head (a lock waiter
	// watching the key it has just created, at its create revision) is
	// then served from memory instead of a Pebble read of the history.
	recent recentRing

	stats hubStats
}

// hubStats counts for metrics; atomics, so counting takes no lock.
type hubStats struct {
	watchers      atomic.Int64
	events        atomic.Uint64
	slowEnds      atomic.Uint64
	compactedEnds atomic.Uint64
}

// Stats is a point-in-time copy of a hub's counters.
type Stats struct {
	// Watchers is the number of watches running now.
	Watchers int64
	// Events counts the events handed to watches' emitters.
	Events uint64
	// SlowEnds counts the watches ended because their consumer fell too
	// far behind (an emitter's SlowError), CompactedEnds those ended
	// because they needed revisions the history no longer holds.
	SlowEnds      uint64
	CompactedEnds uint64
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	return Stats{
		Watchers:      h.stats.watchers.Load(),
		Events:        h.stats.events.Load(),
		SlowEnds:      h.stats.slowEnds.Load(),
		CompactedEnds: h.stats.compactedEnds.Load(),
	}
}

// NewHub returns a hub over hist that keeps up to capacity recent events
// per watched prefix in memory.
func NewHub(hist History, capacity int) *Hub {
	if capacity <= 0 {
		capacity = 4096
	}
	return &Hub{hist: hist, capacity: capacity, head: hist.Revision(), groups: make(map[string]*group)}
}

// Head returns the last revision published.
func (h *Hub) Head() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.head
}

// Publish records newly applied revisions (in order) and wakes the
// watchers they concern. It is called on the apply goroutine and never
// blocks on a watcher.
func (h *Hub) Publish(revs []storage.Revision) {
	if len(revs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if revs[0].Rev != h.head+1 {
		// Not consecutive (cannot happen short of a snapshot, which calls
		// Reset): forget the windows rather than serve a gap.
		h.resetLocked(revs[0].Rev - 1)
	}
	var touched []*group
	for ri := range revs {
		r := &revs[ri]
		first := len(touched)
		for ei := range r.Events {
			ev := &r.Events[ei]
			key := ev.KV.Key
			for l := 0; l <= len(key); l++ {
				g, ok := h.groups[key[:l]]
				if !ok {
					continue
				}
				if add(g, r.Rev, ev) && !contains(touched[first:], g) {
					touched = append(touched, g)
				}
			}
		}
		for _, g := range touched[first:] {
			g.win.endRevision()
		}
		h.head = r.Rev
	}
	h.remember(revs)
	woken := map[*group]bool{}
	for _, g := range touched {
		if !woken[g] {
			woken[g] = true
			close(g.wake)
			g.wake = make(chan struct{})
		}
	}
}

// add appends ev, of revision rev, to g's window, marked as the last
// event of its revision here. It reports whether ev is the first event of
// rev in the window.
func add(g *group, rev int64, ev *storage.Event) (first bool) {
	first = true
	if last := g.win.last(); last != nil && last.rev == rev {
		last.end = false
		first = false
	}
	g.win.push(item{rev: rev, ev: ev, end: true})
	return first
}

// remember adds published revisions to the recent ones.
func (h *Hub) remember(revs []storage.Revision) {
	for _, r := range revs {
		h.recent.push(r)
	}
}

func contains(gs []*group, g *group) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}

// Reset forgets the in-memory windows: the state machine was replaced by
// a snapshot at revision rev. Watchers re-read from storage.
func (h *Hub) Reset(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resetLocked(rev)
}

func (h *Hub) resetLocked(rev int64) {
	h.head = rev
	h.recent.reset()
	for _, g := range h.groups {
		g.win.reset(rev)
		close(g.wake)
		g.wake = make(chan struct{})
	}
}

func (h *Hub) join(prefix string) *group {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.groups[prefix]
	if !ok {
		g = &group{prefix: prefix, win: newWindow(h.capacity, h.head), wake: make(chan struct{})}
		if h.recent.len() > 0 {
			// The recent revisions run without a gap up to head; those the
			// history no longer retains are left out, so a watch from below
			// the history is refused the same way whatever is in memory.
			first := max(h.recent.at(0).Rev, h.hist.OldestRevision())
			g.win.start = first - 1
			for ri := range h.recent.len() {
				r := h.recent.at(ri)
				if r.Rev < first {
					continue
				}
				for ei := range r.Events {
					ev := &r.Events[ei]
					if !strings.HasPrefix(ev.KV.Key, prefix) {
						continue
					}
					add(g, r.Rev, ev)
				}
				g.win.endRevision()
			}
		}
		h.groups[prefix] = g
	}
	g.refs++
	return g
}

func (h *Hub) leave(g *group) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if g.refs--; g.refs == 0 {
		delete(h.groups, g.prefix)
	}
}

// Emitter receives what a watch produces, in order, on the watch's
// goroutine; an error from it ends the watch with that error. end marks
// the last event of its revision under the watched prefix. ev is shared
// with other watchers: read it, never change it.
type Emitter interface {
	Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error
	Progress(ctx context.Context, rev int64) error
}

// Watch delivers the events under prefix with revision > from, in
// revision order, until ctx ends or the emitter or the history fails; it
// then returns the reason. progressNow, when it receives, asks for a
// progress report as soon as the watch is current.
//
// every, when positive, reports progress (the revision the watch is
// current to) whenever nothing was delivered for that long.
func (h *Hub) Watch(ctx context.Context, prefix string, from int64, every time.Duration, e Emitter, progressNow <-chan struct{}) error {
	return h.watch(ctx, prefix, from, every, e, progressNow, nil)
}

// WatchAt is Watch without progress reports of its own: while it waits
// for events, pos says where it waits, and Current reports it current to
// the head for its caller (a member tells a connection's current watches
// in one frame). pos is the caller's, made by NewPosition, one a watch.
func (h *Hub) WatchAt(ctx context.Context, prefix string, from int64, e Emitter, pos *Position) error {
	return h.watch(ctx, prefix, from, 0, e, nil, pos)
}

func (h *Hub) watch(ctx context.Context, prefix string, from int64, every time.Duration, e Emitter, progressNow <-chan struct{}, pos *Position) (err error) {
	h.stats.watchers.Add(1)
	defer func() {
		h.stats.watchers.Add(-1)
		switch {
		case errors.Is(err, errs.SlowWatcher):
			h.stats.slowEnds.Add(1)
		case errors.Is(err, errs.Compacted):
			h.stats.compactedEnds.Add(1)
		}
	}()
	g := h.join(prefix)
	defer h.leave(g)
	if pos != nil {
		pos.g.Store(g)
		defer pos.parked.Store(-1)
	}
	var progress <-chan time.Time
	var timer *time.Timer
	if every > 0 {
		timer = time.NewTimer(every)
		defer timer.Stop()
		progress = timer.C
	}
	wantProgress := false
	var buf []item // this watch's own: the window hands out copies
	for {
		items, wake, current, err := h.read(g, prefix, from, buf[:0])
		if err != nil {
			return err
		}
		for i, it := range items {
			if err := e.Event(ctx, it.rev, it.ev, it.end); err != nil {
				h.stats.events.Add(uint64(i))
				return err
			}
			from = it.rev
			if timer != nil {
				timer.Reset(every)
			}
		}
		// Once per batch rather than per event: one atomic add.
		h.stats.events.Add(uint64(len(items)))
		// Pin no event while waiting.
		clear(items)
		buf = items
		if len(items) > 0 {
			continue
		}
		// Caught up: every event under prefix up to current was delivered.
		from = max(from, current)
		if wantProgress {
			wantProgress = false
			if err := e.Progress(ctx, from); err != nil {
				return err
			}
		}
		if pos != nil {
			// Every event up to from is with the emitter: from here
			// Current may report the watch current.
			pos.parked.Store(from)
		}
		select {
		case <-wake:
		case <-progress:
			wantProgress = true
			timer.Reset(every)
		case <-progressNow:
			wantProgress = true
		case <-ctx.Done():
			return ctx.Err()
		}
		if pos != nil {
			pos.parked.Store(-1)
		}
	}
}

// The most events a watch copies out of a window at once (more only to
// end on a whole revision): enough to make the lock's cost per event
// small, and a bound on what a stuck watcher holds.
const readBatch = 256

// read appends to dst the events under prefix after from, up to whole
// revisions: copies from the group's window when it covers from, else
// from the history. With nothing to deliver it returns the revision the
// watch is current to and the channel that says when there may be more.
func (h *Hub) read(g *group, prefix string, from int64, dst []item) ([]item, <-chan struct{}, int64, error) {
	h.mu.RLock()
	wake, head := g.wake, h.head
	if from >= g.win.start {
		// Copied under the lock: the window's ring is Publish's to move
		// and overwrite as soon as the lock is released.
		dst = g.win.copyAfter(from, dst, readBatch)
		h.mu.RUnlock()
		return dst, wake, head, nil
	}
	h.mu.RUnlock()
	const batch = 256
	for {
		revs, err := h.hist.History(from, batch)
		if errors.Is(err, storage.ErrCompacted) {
			return nil, wake, 0, &CompactedError{Oldest: h.hist.OldestRevision()}
		}
		if err != nil {
			return nil, wake, 0, err
		}
		if len(revs) == 0 {
			// The history has nothing after from yet (the window lags the
			// history only while a publish is on its way).
			return dst, wake, from, nil
		}
		for ri := range revs {
			r := &revs[ri]
			n := len(dst)
			for ei := range r.Events {
				if strings.HasPrefix(r.Events[ei].KV.Key, prefix) {
					dst = append(dst, item{rev: r.Rev, ev: &r.Events[ei]})
				}
			}
			if len(dst) > n {
				dst[len(dst)-1].end = true
			}
			from = r.Rev
		}
		if len(dst) > 0 {
			return dst, wake, from, nil
		}
		if from >= head {
			return dst, wake, from, nil
		}
	}
}
