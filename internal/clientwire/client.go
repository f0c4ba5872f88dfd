package clientwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ClientOptions configure the client end of a connection.
type ClientOptions struct {
	// Name is sent in the Hello, for the member's logs.
	Name string
	// MaxFrame is the longest frame accepted from the member (default
	// DefaultMaxFrame, at least MinMaxFrame).
	MaxFrame int
	// OnKeepAliveAck receives every KeepAliveAck, on the reader goroutine:
	// it must not block.
	OnKeepAliveAck func(*KeepAliveAck)
	// Logger receives a line when the connection fails (default
	// slog.Default()).
	Logger *slog.Logger
}

// ClientConn is the client end of a connection to a member: calls
// multiplexed by request ID, watches, keep-alives. It is safe for
// concurrent use. It does not reconnect: once Done is closed, make a new
// one (to another member, resuming watches from their End().Rev+1).
type ClientConn struct {
	conn    net.Conn
	opts    ClientOptions
	welcome Welcome
	out     *outQueue
	slots   chan struct{} // the member's in-flight limit
	done    chan struct{}
	wg      sync.WaitGroup

	// lastFrame is when the member's last frame arrived (Unix ns): a
	// member that keeps sending is alive, however long one answer takes.
	lastFrame atomic.Int64

	mu      sync.Mutex
	err     error
	nextID  uint64
	nextW   uint64
	pending map[uint64]*call
	watches map[uint64]*ClientWatch
}

// Handshake sends the Hello over conn and waits for the member's answer
// (bounded by ctx). On success the ClientConn owns conn; on failure conn
// is closed. A refusal is a *RefusedError (ErrRefused).
func Handshake(ctx context.Context, conn net.Conn, opts ClientOptions) (*ClientConn, error) {
	if opts.MaxFrame == 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	opts.MaxFrame = max(opts.MaxFrame, MinMaxFrame)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	w, fr, err := clientHandshake(ctx, conn, &opts)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	c := &ClientConn{
		conn: conn, opts: opts, welcome: *w,
		out:     newOutQueue(conn, w.Version, int(w.MaxFrame), queueBounds{}),
		slots:   make(chan struct{}, max(w.MaxInFlight, 1)),
		done:    make(chan struct{}),
		pending: make(map[uint64]*call),
		watches: make(map[uint64]*ClientWatch),
	}
	c.wg.Go(func() {
		if err := c.out.run(); err != nil {
			c.fail(err)
		}
	})
	c.lastFrame.Store(time.Now().UnixNano()) // the Welcome
	c.wg.Go(func() { c.fail(c.readLoop(fr)) })
	return c, nil
}

func clientHandshake(ctx context.Context, conn net.Conn, opts *ClientOptions) (*Welcome, *frameReader, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	hello := &Hello{MinVersion: MinVersion, MaxVersion: MaxVersion, Name: opts.Name, MaxFrame: uint32(opts.MaxFrame)}
	b, err := AppendFrame(nil, handshakeVersion, 0, hello, handshakeMaxFrame)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Write(b); err != nil {
		return nil, nil, ctxOr(ctx, err)
	}
	fr := newFrameReader(conn)
	f, err := fr.read(handshakeMaxFrame)
	if err != nil {
		return nil, nil, ctxOr(ctx, err)
	}
	if err := checkFrame(f, 0); err != nil {
		return nil, nil, err
	}
	m, err := DecodeMessage(f.Kind, f.Payload)
	if err != nil {
		return nil, nil, err
	}
	switch m := m.(type) {
	case *Refuse:
		return nil, nil, &RefusedError{Reason: m.Reason, Message: m.Message}
	case *Welcome:
		if m.Version < MinVersion || m.Version > MaxVersion {
			return nil, nil, fmt.Errorf("%w: member chose version %d", ErrVersion, m.Version)
		}
		if m.MaxFrame < MinMaxFrame {
			return nil, nil, fmt.Errorf("%w: member frame limit %d", ErrProtocol, m.MaxFrame)
		}
		if !stop() {
			return nil, nil, ctx.Err()
		}
		_ = conn.SetDeadline(time.Time{})
		return m, fr, nil
	}
	return nil, nil, fmt.Errorf("%w: handshake answered with kind %d", ErrProtocol, f.Kind)
}

func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Welcome is what the member said about itself and its limits.
func (c *ClientConn) Welcome() Welcome { return c.welcome }

// Done is closed once the connection has ended; Err says why.
func (c *ClientConn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (ErrConnClosed after Close), nil while
// it is open.
func (c *ClientConn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection: pending calls fail with ErrConnClosed,
// watches end with CodeConnLost. It waits for the connection's goroutines.
func (c *ClientConn) Close() error {
	c.fail(ErrConnClosed)
	c.wg.Wait()
	return nil
}

// fail ends the connection once, for err.
func (c *ClientConn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = ErrConnClosed
	} else if !errors.Is(err, ErrConnClosed) {
		c.opts.Logger.Warn("clientwire: connection to member failed", "member", c.welcome.Member, "err", err)
		err = fmt.Errorf("%w: %w", ErrConnClosed, err)
	}
	c.err = err
	// abandoned is written by Call under c.mu: read it here, before the
	// lock is let go.
	var waiting []chan Message
	for _, p := range c.pending {
		if !p.abandoned {
			waiting = append(waiting, p.ch)
		}
	}
	watches := c.watches
	c.pending, c.watches = nil, nil
	c.mu.Unlock()
	c.out.close()
	_ = c.conn.Close()
	close(c.done)
	for _, ch := range waiting {
		close(ch)
	}
	for _, w := range watches {
		w.finish(&WatchEnd{WatchID: w.id, Code: CodeConnLost, Message: err.Error()})
	}
}

// Call sends the request req and waits for its response, for ctx, or for
// the connection to end. It waits first for one of the member's
// in-flight places. A member's error is an *Error; a context error is
// returned as is (the member is told to abandon the request, and its
// late answer is dropped).
func (c *ClientConn) Call(ctx context.Context, req Message) (Message, error) {
	if !hasID(req.Kind()) || req.Kind() == KindCancel || isResponse(req.Kind()) {
		return nil, fmt.Errorf("%w: kind %d is not a request", ErrProtocol, req.Kind())
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, c.Err()
	}
	p := &call{ch: make(chan Message, 1)}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		<-c.slots
		return nil, c.err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = p
	c.mu.Unlock()
	if _, err := c.out.push(id, req, nil); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		<-c.slots
		return nil, err
	}
	select {
	case m, ok := <-p.ch:
		<-c.slots
		if !ok {
			return nil, c.Err()
		}
		if e, isErr := m.(*ErrorMsg); isErr {
			return nil, &Error{Code: e.Code, Message: e.Message}
		}
		return m, nil
	case <-ctx.Done():
		c.mu.Lock()
		_, waiting := c.pending[id]
		// Still unanswered: the member still counts it against the
		// limit, so its place is given back when the late answer comes
		// (or the connection ends), not now.
		p.abandoned = waiting
		c.mu.Unlock()
		if waiting {
			_, _ = c.out.push(id, &Cancel{}, nil)
		} else {
			<-c.slots
		}
		return nil, ctx.Err()
	}
}

// call is a request waiting for its answer.
type call struct {
	ch        chan Message // buffered: the reader's one send never blocks
	abandoned bool         // the caller gave up; the reader frees its place
}

func isResponse(k Kind) bool {
	switch k {
	case KindPong, KindProposeResult, KindReadResult, KindOK, KindError, KindTimeToLiveResult, KindMembersResult,
		KindRangeResult, KindNestedResult:
		return true
	}
	return false
}

// LastFrame is when the last frame from the member arrived (the
// handshake's answer before any other).
func (c *ClientConn) LastFrame() time.Time { return time.Unix(0, c.lastFrame.Load()) }

// Ping checks that the member answers.
func (c *ClientConn) Ping(ctx context.Context) error {
	_, err := c.Call(ctx, &Ping{})
	return err
}

// Read sends r and returns its result. A paged read (After or Limit)
// fails with ErrVersion, sending nothing, when the member speaks a
// version without them.
func (c *ClientConn) Read(ctx context.Context, r *Read) (*ReadResult, error) {
	if !r.Ranged {
		if err := c.checkPaged(r); err != nil {
			return nil, err
		}
	}
	if err := c.checkRanged(r); err != nil {
		return nil, err
	}
	m, err := c.Call(ctx, r)
	if err != nil {
		return nil, err
	}
	res, ok := m.(*ReadResult)
	if !ok || res.Ranged != r.Ranged {
		return nil, c.violation(m)
	}
	return res, nil
}

// Propose proposes the encoded command cmd and returns its result.
func (c *ClientConn) Propose(ctx context.Context, cmd []byte) (*ProposeResult, error) {
	if err := c.checkNested(cmd); err != nil {
		return nil, err
	}
	m, err := c.Call(ctx, &Propose{Command: cmd})
	if err != nil {
		return nil, err
	}
	res, ok := m.(*ProposeResult)
	if !ok {
		return nil, c.violation(m)
	}
	return res, nil
}

// TimeToLive asks for the time left on one of the client's sessions. A
// member that speaks only version 1 cannot answer: ErrVersion, and the
// connection stays.
func (c *ClientConn) TimeToLive(ctx context.Context, sessionID int64) (time.Duration, error) {
	res, err := c.AskTimeToLive(ctx, sessionID)
	if err != nil {
		return 0, err
	}
	return res.Left, nil
}

// AskTimeToLive is TimeToLive with the member's whole answer: the time
// left and the session's granted TTL (0 from a member that did not say).
func (c *ClientConn) AskTimeToLive(ctx context.Context, sessionID int64) (*TimeToLiveResult, error) {
	if v := c.welcome.Version; v < 2 {
		return nil, fmt.Errorf("%w: member %q speaks version %d, time to live needs 2", ErrVersion, c.welcome.Member, v)
	}
	m, err := c.Call(ctx, &TimeToLive{SessionID: sessionID})
	if err != nil {
		return nil, err
	}
	res, ok := m.(*TimeToLiveResult)
	if !ok {
		return nil, c.violation(m)
	}
	return res, nil
}

// violation ends the connection over a response of the wrong kind.
func (c *ClientConn) violation(m Message) error {
	err := fmt.Errorf("%w: unexpected response kind %d", ErrProtocol, m.Kind())
	c.fail(err)
	return err
}

// KeepAlive sends ka without waiting; its ack comes to
// ClientOptions.OnKeepAliveAck.
func (c *ClientConn) KeepAlive(ka *KeepAlive) error {
	_, err := c.out.push(0, ka, nil)
	return err
}

func (c *ClientConn) readLoop(fr *frameReader) error {
	for {
		f, err := fr.read(c.opts.MaxFrame)
		if err != nil {
			return err
		}
		if err := checkFrame(f, c.welcome.Version); err != nil {
			return err
		}
		c.lastFrame.Store(time.Now().UnixNano())
		m, err := DecodeMessage(f.Kind, f.Payload)
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *KeepAliveAck:
			if c.opts.OnKeepAliveAck != nil {
				c.opts.OnKeepAliveAck(m)
			}
		case *WatchEvents:
			c.toWatch(m.WatchID, m)
		case *WatchProgress:
			c.toWatch(m.WatchID, m)
		case *WatchesCurrent:
			// To each watch its own report, as from a member of an
			// older version: an onFrame may keep what it is handed.
			for _, id := range m.WatchIDs {
				c.toWatch(id, &WatchProgress{WatchID: id, Rev: m.Rev})
			}
		case *WatchEnd:
			c.mu.Lock()
			w := c.watches[m.WatchID]
			delete(c.watches, m.WatchID)
			c.mu.Unlock()
			if w != nil {
				w.finish(m)
			}
		default:
			if !isResponse(f.Kind) {
				return fmt.Errorf("%w: kind %d is not sent by members", ErrProtocol, f.Kind)
			}
			c.mu.Lock()
			p, ok := c.pending[f.ID]
			delete(c.pending, f.ID)
			issued := f.ID <= c.nextID
			// Read under mu: Call sets it under mu when its caller gives up.
			abandoned := ok && p.abandoned
			c.mu.Unlock()
			switch {
			case !issued || !ok:
				return fmt.Errorf("%w: response to request %d, never sent or already answered", ErrProtocol, f.ID)
			case abandoned:
				<-c.slots // the late answer of a cancelled call: dropped
			default:
				p.ch <- m
			}
		}
	}
}
