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
	"strings"
	"sync"
	"sync/atomic"

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
	win    window // the events under prefix, up to hub.head
	// gen counts the window's changes (a revision added, a reset): a
	// watch that read it at one gen may wait only while it is unchanged.
	gen uint64
	// parked are the watches waiting for the window to change, with no
	// goroutine (sub.go); a change sets them going again.
	parked []*Sub
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
	// closed: Close ended every watch, and a new one ends at once.
	closed bool

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
	unlocked := false
	defer func() {
		if !unlocked {
			h.mu.Unlock()
		}
	}()
	var run []*Sub
	if revs[0].Rev != h.head+1 {
		// Not consecutive (cannot happen short of a snapshot, which calls
		// Reset): forget the windows rather than serve a gap.
		run = h.resetLocked(revs[0].Rev-1, run)
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
	for _, g := range touched {
		run = g.changedLocked(run)
	}
	h.mu.Unlock()
	unlocked = true
	spawn(run)
}

// changedLocked marks g's window changed and appends to run the watches
// it takes off the parked list, for the caller to set going once the
// lock is released. Under h.mu.
func (g *group) changedLocked(run []*Sub) []*Sub {
	g.gen++
	for _, s := range g.parked {
		s.unparkLocked()
		run = append(run, s)
	}
	clear(g.parked)
	g.parked = g.parked[:0]
	return run
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
	run := h.resetLocked(rev, nil)
	h.mu.Unlock()
	spawn(run)
}

// resetLocked forgets the windows, appending to run the watches to set
// going again.
func (h *Hub) resetLocked(rev int64, run []*Sub) []*Sub {
	h.head = rev
	h.recent.reset()
	for _, g := range h.groups {
		g.win.reset(rev)
		run = g.changedLocked(run)
	}
	return run
}

func (h *Hub) join(prefix string) *group {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.groups[prefix]
	if !ok {
		g = &group{prefix: prefix, win: newWindow(h.capacity, h.head)}
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
