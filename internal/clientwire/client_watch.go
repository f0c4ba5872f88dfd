package clientwire

import (
	"context"
	"sync"
)

// ClientWatch is the client end of a watch. Its frames (*WatchEvents and
// *WatchProgress) are handed, in order, to the onFrame given to Watch;
// Done is closed after the last, and End then says why the watch ended
// and the revision to resume from.
type ClientWatch struct {
	c       *ClientConn
	id      uint64
	onFrame func(Message) bool
	done    chan struct{}

	mu    sync.Mutex
	rev   int64 // delivered up to
	end   *WatchEnd
	after func() // AfterEnd's
}

// Watch starts a watch; ws.WatchID is set by the connection. It returns
// once the member has accepted the watch (or refused it: an *Error, such
// as ErrTooManyWatchers).
//
// onFrame receives the watch's frames on the connection's reader
// goroutine, so it must not block: it hands each to a queue of the
// caller's and returns true, or returns false when its consumer has
// fallen too far behind, which ends the watch (CodeSlowWatcher), never
// the connection. Frames may reach it before Watch returns, never after
// Done is closed. No buffer is kept here: a watch costs the client only
// what its consumer queues.
func (c *ClientConn) Watch(ctx context.Context, ws *WatchStart, onFrame func(Message) bool) (*ClientWatch, error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.nextW++
	ws.WatchID = c.nextW
	w := &ClientWatch{c: c, id: ws.WatchID, onFrame: onFrame, done: make(chan struct{}),
		rev: max(ws.FromRev-1, 0)}
	// Registered before the request goes out: frames may follow the OK
	// at once.
	c.watches[w.id] = w
	c.mu.Unlock()
	if _, err := c.Call(ctx, ws); err != nil {
		c.mu.Lock()
		delete(c.watches, w.id)
		c.mu.Unlock()
		if ctx.Err() != nil {
			// The member may have started it: make sure it stops.
			_, _ = c.out.push(0, &WatchCancel{WatchID: w.id}, nil)
		}
		return nil, err
	}
	return w, nil
}

// ID is the watch's ID on its connection.
func (w *ClientWatch) ID() uint64 { return w.id }

// Done is closed when the watch has ended, after its last frame.
func (w *ClientWatch) Done() <-chan struct{} { return w.done }

// AfterEnd has fn run, on a goroutine of its own, once the watch has
// ended (at once if it has): for a caller that keeps no goroutine
// waiting on Done. One fn a watch.
func (w *ClientWatch) AfterEnd(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end != nil {
		go fn()
		return
	}
	w.after = fn
}

// End is why the watch ended (nil while it runs). Code CodeNone follows
// Cancel; CodeSlowWatcher means this consumer (or the connection) fell
// behind; CodeConnLost that the connection ended. Rev is the revision
// delivered up to: resume from Rev+1.
func (w *ClientWatch) End() *WatchEnd {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

// Cancel ends the watch now and tells the member.
func (w *ClientWatch) Cancel() {
	c := w.c
	c.mu.Lock()
	_, open := c.watches[w.id]
	delete(c.watches, w.id)
	c.mu.Unlock()
	if open {
		_, _ = c.out.push(0, &WatchCancel{WatchID: w.id}, nil)
		w.finish(&WatchEnd{WatchID: w.id})
	}
}

// toWatch hands a frame to its watch without blocking the reader: a
// consumer that cannot take it loses its watch (slow), never the
// connection.
func (c *ClientConn) toWatch(id uint64, m Message) {
	c.mu.Lock()
	w := c.watches[id]
	c.mu.Unlock()
	if w == nil {
		return // cancelled here; the member's frames still in flight
	}
	if w.deliver(m) {
		return
	}
	c.mu.Lock()
	delete(c.watches, id)
	c.mu.Unlock()
	_, _ = c.out.push(0, &WatchCancel{WatchID: id}, nil)
	w.finish(&WatchEnd{WatchID: id, Code: CodeSlowWatcher, Message: "the consumer fell behind the watch"})
}

// deliver hands m to the consumer; false if it could not take it. The
// lock orders it with finish: no frame reaches onFrame once the watch
// has ended, and every frame handed before is done when Done closes.
func (w *ClientWatch) deliver(m Message) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end != nil {
		return true
	}
	if !w.onFrame(m) {
		return false
	}
	switch m := m.(type) {
	case *WatchEvents:
		w.rev = max(w.rev, m.Rev)
	case *WatchProgress:
		w.rev = max(w.rev, m.Rev)
	}
	return true
}

// finish records the end (Rev is what was delivered here, whatever the
// member said) and closes Done, once.
func (w *ClientWatch) finish(e *WatchEnd) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end == nil {
		e.Rev = w.rev
		w.end = e
		close(w.done)
		if w.after != nil {
			go w.after()
		}
	}
}
