package clientwire

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// outQueue is a connection's outgoing side: any goroutine queues frames,
// one writer goroutine writes everything queued in one Write (so frames
// that pile up while a write is in progress go out together), then runs
// the release callbacks of the frames written.
//
// On a member the queue is bounded in bytes (frames being written count
// until their write returns) by its own limit and by the Budget it
// shares with the member's other clients, and each write has a deadline:
// a client that does not read is cut off (ErrSlowReader), never buffered
// without bound. The client end has no bounds: it writes only what its
// own callers send.
type outQueue struct {
	conn     net.Conn
	version  uint8
	maxFrame int // the longest frame sent: the peer's limit, and the member's own
	bounds   queueBounds

	mu       sync.Mutex
	buf      []byte
	releases []release
	closed   bool
	cutErr   error         // why the queue was cut (nil for a plain close)
	wake     chan struct{} // capacity 1: something was queued
	done     chan struct{} // closed by close and cut
}

// queueBounds are a member's bounds on one connection's queue; the zero
// value bounds nothing.
type queueBounds struct {
	// limit is the most bytes queued unwritten; streamLimit the most a
	// watch's frame may find queued with it (less than limit, so a watch
	// that falls behind ends as slow before the replies' room runs out).
	limit, streamLimit int
	// writeTimeout is the deadline of a write, plus its size at
	// minWriteRate; 0 = none.
	writeTimeout time.Duration
	budget       *Budget
}

// minWriteRate is the slowest a member expects a client to read a long
// write, beyond the write timeout itself: 1 MiB/s.
const minWriteRate = 1 << 20

// release is a frame's callback and its length.
type release struct {
	f func(n int)
	n int
}

// errQueueFull refuses a watch's frame that does not fit: the watch ends
// as slow, the connection stays.
var errQueueFull = errors.New("clientwire: the connection's queue is full")

func newOutQueue(conn net.Conn, version uint8, maxFrame int, b queueBounds) *outQueue {
	q := &outQueue{conn: conn, version: version, maxFrame: maxFrame, bounds: b,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	if b.budget != nil {
		b.budget.register(q)
	}
	return q
}

// isStream reports whether frames of kind k belong to a watch's stream:
// those end their watch when they do not fit, where any other frame
// cuts the connection.
func isStream(k Kind) bool {
	return k == KindWatchEvents || k == KindWatchProgress || k == KindWatchesCurrent
}

// push queues m's frame and returns its length. release, if not nil,
// runs with that length once the frame is written or dropped (or with 0
// when the queue is already closed). A frame over the send limit is
// refused with ErrFrameTooLarge, a watch's frame that does not fit with
// errQueueFull (release does not run for either). Any other frame that
// does not fit cuts the connection as a slow reader; that and a closed
// queue give ErrConnClosed (release runs).
func (q *outQueue) push(id uint64, m Message, rel func(n int)) (int, error) {
	version := q.version
	k := m.Kind()
	if k == KindHello || k == KindWelcome || k == KindRefuse {
		version = handshakeVersion
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		if rel != nil {
			rel(0)
		}
		return 0, ErrConnClosed
	}
	start := len(q.buf)
	var err error
	q.buf, err = AppendFrame(q.buf, version, id, m, q.maxFrame)
	if err != nil {
		q.mu.Unlock()
		return 0, err
	}
	n := len(q.buf) - start
	var victims []*outQueue
	if b := q.bounds.budget; b != nil {
		limit := q.bounds.limit
		if isStream(k) {
			limit = q.bounds.streamLimit
		}
		victims, err = b.admit(q, n, limit)
		if err != nil {
			q.buf = q.buf[:start]
		}
	}
	if err == nil && rel != nil {
		q.releases = append(q.releases, release{rel, n})
	}
	q.mu.Unlock()
	for _, v := range victims {
		v.cut(fmt.Errorf("%w: its queue was the longest when the member's client budget ran out", ErrSlowReader))
	}
	switch {
	case err == nil:
	case errors.Is(err, errQueueFull) && isStream(k):
		return 0, err
	default:
		if errors.Is(err, errQueueFull) {
			q.cut(fmt.Errorf("%w: %d bytes more would pass its limit: %v", ErrSlowReader, n, err))
		}
		if rel != nil {
			rel(0)
		}
		return 0, ErrConnClosed
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return n, nil
}

// run is the writer goroutine. It returns nil once the queue is closed,
// or why it was cut (a write that failed or missed its deadline, a slow
// reader); either way every pending release has run, and a cut queue
// has closed the connection.
func (q *outQueue) run() error {
	var spare []byte
	var done []release
	for {
		select {
		case <-q.wake:
		case <-q.done:
			q.drop()
			return q.err()
		}
		q.mu.Lock()
		buf, rel := q.buf, q.releases
		q.buf, q.releases = spare[:0], done[:0]
		q.mu.Unlock()
		if t := q.bounds.writeTimeout; t > 0 {
			_ = q.conn.SetWriteDeadline(time.Now().Add(t + time.Duration(len(buf))*time.Second/minWriteRate))
		}
		_, err := q.conn.Write(buf)
		if b := q.bounds.budget; b != nil {
			b.written(q, len(buf))
		}
		for i, r := range rel {
			r.f(r.n)
			rel[i] = release{}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("%w: a write of %d bytes missed its deadline", ErrSlowReader, len(buf))
			}
			q.cut(err)
			q.drop()
			return q.err()
		}
		// Keep the buffers for reuse unless a burst made them large.
		spare, done = nil, nil
		if cap(buf) <= 1<<20 {
			spare, done = buf, rel
		}
	}
}

// close stops the queue: later pushes fail, the writer ends.
func (q *outQueue) close() { q.stop(nil) }

// cut stops the queue for err and closes the connection at once, so the
// writer and the reader end too.
func (q *outQueue) cut(err error) {
	if q.stop(err) {
		hardClose(q.conn)
	}
}

// stop closes the queue, recording err as the cause if it is the first
// to; it reports whether it did.
func (q *outQueue) stop(err error) bool {
	q.mu.Lock()
	first := !q.closed
	if first {
		q.closed, q.cutErr = true, err
		close(q.done)
	}
	q.mu.Unlock()
	if first && q.bounds.budget != nil {
		q.bounds.budget.forget(q)
	}
	return first
}

// err is why the queue was cut, nil if it was closed or still runs.
func (q *outQueue) err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cutErr
}

// drop runs the releases of frames that will never be written.
func (q *outQueue) drop() {
	q.mu.Lock()
	rel := q.releases
	q.buf, q.releases = nil, nil
	q.mu.Unlock()
	for _, r := range rel {
		r.f(r.n)
	}
}

// hardClose closes c without waiting on its peer: a TLS connection's
// Close sends a close_notify first, which blocks (up to five seconds)
// when the peer does not read, so the connection under it is closed
// first.
func hardClose(c net.Conn) {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		_ = nc.NetConn().Close()
	}
	_ = c.Close()
}

// Budget bounds the bytes queued unwritten across the connections that
// share it (a member's clients, Limits.Budget), and counts them. When a
// frame would take the total past the limit, the connection with the
// longest queue is cut as a slow reader, and its bytes are given back at
// once, if its queue is longer than the pushing one's would be with the
// frame; otherwise the frame does not fit (a watch's frame ends its
// watch, any other cuts its own connection). So a client that does not
// read loses its own connection first, and the total never passes the
// limit. It is safe for concurrent use.
type Budget struct {
	limit int64

	mu     sync.Mutex
	total  int64
	peak   int64
	queues map[*outQueue]int64 // the live queues and their bytes
}

// NewBudget returns a budget of limit bytes; limit ≤ 0 bounds nothing
// and only counts.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, queues: make(map[*outQueue]int64)}
}

// Queued returns the bytes queued now.
func (b *Budget) Queued() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Peak returns the most bytes ever queued at once.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

func (b *Budget) register(q *outQueue) {
	b.mu.Lock()
	b.queues[q] = 0
	b.mu.Unlock()
}

// forget gives back what a closed queue still counted.
func (b *Budget) forget(q *outQueue) {
	b.mu.Lock()
	b.total -= b.queues[q]
	delete(b.queues, q)
	b.mu.Unlock()
}

// written gives back n bytes q wrote (nothing once q was cut: its bytes
// went back then).
func (b *Budget) written(q *outQueue, n int) {
	b.mu.Lock()
	if cur, ok := b.queues[q]; ok {
		b.queues[q] = cur - int64(n)
		b.total -= int64(n)
	}
	b.mu.Unlock()
}

// admit counts n more bytes for q if q stays within limit and the total
// within the budget, cutting longer queues to make room (it returns
// them: the caller cuts them once it holds no lock). Called with q.mu
// held; it never takes another queue's.
func (b *Budget) admit(q *outQueue, n, limit int) (victims []*outQueue, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, ok := b.queues[q]
	if !ok {
		return nil, ErrConnClosed // cut meanwhile
	}
	after := cur + int64(n)
	if after > int64(limit) {
		return nil, fmt.Errorf("%w: %d bytes queued, limit %d", errQueueFull, cur, limit)
	}
	for b.limit > 0 && b.total+int64(n) > b.limit {
		var v *outQueue
		longest := after
		for o, ob := range b.queues {
			if o != q && ob > longest {
				v, longest = o, ob
			}
		}
		if v == nil {
			return victims, fmt.Errorf("%w: the member's clients have %d bytes queued, its limit %d", errQueueFull, b.total, b.limit)
		}
		b.total -= longest
		delete(b.queues, v)
		victims = append(victims, v)
	}
	b.queues[q] = after
	b.total += int64(n)
	b.peak = max(b.peak, b.total)
	return victims, nil
}
