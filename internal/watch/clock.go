package watch

import (
	"sync"
	"time"
)

// A member serves each client's watch with a progress report every
// election timeout on a quiet prefix, so that the client resumes near the
// head after it moves, and the client drops nothing: its emitter sends
// a report only at a revision newer than the last it told. With a timer
// per watch, 170,000 idle watches on one member woke 170,000 goroutines a
// second through the runtime's timer heap (half that member's CPU in the
// scale run) to find, nearly always, nothing newer to tell.
//
// Such watches share one clock per interval instead. A tick wakes them
// only when one of them may have something to tell: the head moved since
// the last tick that woke them (every idle watch is then behind it), or a
// watch parked behind its own position (it delivered events, or caught up
// through the history, after its last report). In a cell at rest a tick
// costs one timer and no wake-up.

// progressClock is the shared clock of the watches whose reports come
// every `every`.
type progressClock struct {
	h     *Hub
	every time.Duration

	mu      sync.Mutex
	refs    int
	timer   *time.Timer
	ch      chan struct{} // closed by the tick that wakes its watches, then replaced
	head    int64         // the head at the last tick that woke them
	pending bool          // a watch parked with something to tell
}

// clocks holds the hub's clocks, one per interval in use.
type clocks struct {
	mu sync.Mutex
	by map[time.Duration]*progressClock
}

// acquire returns the clock of interval every, started for one more watch.
func (h *Hub) acquireClock(every time.Duration) *progressClock {
	h.clocks.mu.Lock()
	defer h.clocks.mu.Unlock()
	c := h.clocks.by[every]
	if c == nil {
		if h.clocks.by == nil {
			h.clocks.by = make(map[time.Duration]*progressClock)
		}
		c = &progressClock{h: h, every: every, ch: make(chan struct{}), head: h.Head()}
		c.timer = time.AfterFunc(every, c.tick)
		h.clocks.by[every] = c
	}
	c.mu.Lock()
	c.refs++
	c.mu.Unlock()
	return c
}

// release gives c back; the last watch to leave stops it.
func (h *Hub) releaseClock(c *progressClock) {
	h.clocks.mu.Lock()
	defer h.clocks.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs--; c.refs > 0 {
		return
	}
	c.timer.Stop()
	c.timer = nil
	delete(h.clocks.by, c.every)
}

// park returns the channel the next waking tick closes. behind says the
// watch has something to tell (its position is past its last report), so
// that tick wakes it even if the head has not moved. The channel is taken
// before the mark, under one lock, so no tick can consume the mark and
// leave the watch waiting on a channel that tick did not close.
func (c *progressClock) park(behind bool) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if behind {
		c.pending = true
	}
	return c.ch
}

func (c *progressClock) tick() {
	head := c.h.Head()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil {
		return // released meanwhile
	}
	if head != c.head || c.pending {
		close(c.ch)
		c.ch = make(chan struct{})
		c.head, c.pending = head, false
	}
	c.timer.Reset(c.every)
}
