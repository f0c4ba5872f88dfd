package watch

import "sync/atomic"

// Position is where a watch started with one (Hub.Start) waits, for
// Current to read without waking it.
type Position struct {
	// parked is the revision the watch has handed its emitter every event
	// up to, while it waits for more; -1 while it runs.
	parked atomic.Int64
	g      atomic.Pointer[group]
}

// NewPosition returns the position of a watch not yet waiting.
func NewPosition() *Position {
	p := &Position{}
	p.parked.Store(-1)
	return p
}

// Current returns the head and appends to dst the index in ps of each
// position whose watch is current to it: waiting, with every event under
// its prefix up to the head handed to its emitter. Publish is held off
// meanwhile, so no event up to the head can reach such a watch after
// Current returns: whatever the caller queues after the emitter's frames
// to say so cannot overtake an event it covers.
func (h *Hub) Current(ps []*Position, dst []int) (int64, []int) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for i, p := range ps {
		at := p.parked.Load()
		g := p.g.Load()
		if at < 0 || g == nil {
			continue
		}
		// The window holds every event of the prefix in (start, head]:
		// none after at means none to come up to the head. A window that
		// starts after at (reset by a snapshot, or past its capacity)
		// cannot say: the watch reads the history when it wakes.
		if at < g.win.start {
			continue
		}
		if last := g.win.last(); last != nil && last.rev > at {
			continue
		}
		dst = append(dst, i)
	}
	return h.head, dst
}
