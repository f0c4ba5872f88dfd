package clientwire

import (
	"net"
	"sync"
)

// outQueue is a connection's outgoing side: any goroutine queues frames,
// one writer goroutine writes everything queued in one Write (so frames
// that pile up while a write is in progress go out together), then runs
// the release callbacks of the frames written.
type outQueue struct {
	conn     net.Conn
	version  uint8
	maxFrame int // the peer's limit

	mu       sync.Mutex
	buf      []byte
	releases []func()
	closed   bool
	wake     chan struct{} // capacity 1: something was queued
	done     chan struct{} // closed by close
}

func newOutQueue(conn net.Conn, version uint8, maxFrame int) *outQueue {
	return &outQueue{conn: conn, version: version, maxFrame: maxFrame,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// push queues m's frame. release, if not nil, runs once the frame is
// written or the queue is closed. A frame over the peer's limit is
// refused with ErrFrameTooLarge (release does not run); a closed queue
// gives ErrConnClosed (release runs).
func (q *outQueue) push(id uint64, m Message, release func()) error {
	version := q.version
	if k := m.Kind(); k == KindHello || k == KindWelcome || k == KindRefuse {
		version = handshakeVersion
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		if release != nil {
			release()
		}
		return ErrConnClosed
	}
	var err error
	q.buf, err = AppendFrame(q.buf, version, id, m, q.maxFrame)
	if err == nil && release != nil {
		q.releases = append(q.releases, release)
	}
	q.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// run is the writer goroutine. It returns the write error that ended it,
// or nil once the queue is closed; either way the connection is closed
// and every pending release has run.
func (q *outQueue) run() error {
	var spare []byte
	var done []func()
	for {
		select {
		case <-q.wake:
		case <-q.done:
			q.drop()
			return nil
		}
		q.mu.Lock()
		buf, rel := q.buf, q.releases
		q.buf, q.releases = spare[:0], done[:0]
		q.mu.Unlock()
		_, err := q.conn.Write(buf)
		for i, f := range rel {
			f()
			rel[i] = nil
		}
		if err != nil {
			q.close()
			q.drop()
			_ = q.conn.Close()
			return err
		}
		// Keep the buffers for reuse unless a burst made them large.
		spare, done = nil, nil
		if cap(buf) <= 1<<20 {
			spare, done = buf, rel
		}
	}
}

// close stops the queue: later pushes fail, the writer ends.
func (q *outQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}

// drop runs the releases of frames that will never be written.
func (q *outQueue) drop() {
	q.mu.Lock()
	rel := q.releases
	q.buf, q.releases = nil, nil
	q.mu.Unlock()
	for _, f := range rel {
		f()
	}
}
