package clientwire

import (
	"context"
	"sync"
)

// ClientWatch is the client end of a watch. Its frames (*WatchEvents and
// *WatchProgress) arrive on Events, lossless and in order; the channel is
// closed after the last, and End then says why the watch ended and the
// revision to resume from.
type ClientWatch struct {
	c      *ClientConn
	id     uint64
	events chan Message

	mu  sync.Mutex
	rev int64 // delivered up to
	end *WatchEnd
}

// Watch starts a watch; ws.WatchID is set by the connection. It returns
// once the member has accepted the watch (or refused it: an *Error, such
// as ErrTooManyWatchers).
func (c *ClientConn) Watch(ctx context.Context, ws *WatchStart) (*ClientWatch, error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.nextW++
	ws.WatchID = c.nextW
	w := &ClientWatch{c: c, id: ws.WatchID, events: make(chan Message, c.opts.WatchBuffer),
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

// Events delivers the watch's frames; closed when the watch has ended.
func (w *ClientWatch) Events() <-chan Message { return w.events }

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
// consumer that fell WatchBuffer frames behind loses its watch (slow),
// never the connection.
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

// deliver queues m for the consumer; false if the buffer is full. The
// lock orders it with finish, which closes the channel.
func (w *ClientWatch) deliver(m Message) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end != nil {
		return true
	}
	select {
	case w.events <- m:
	default:
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
// member said) and closes Events, once.
func (w *ClientWatch) finish(e *WatchEnd) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end == nil {
		e.Rev = w.rev
		w.end = e
		close(w.events)
	}
}
