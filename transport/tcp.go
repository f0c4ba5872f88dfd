package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"
)

// Defaults for zero fields of TCPConfig, and fixed tuning.
const (
	// DefaultQueueSize is the per-peer send queue length when
	// TCPConfig.QueueSize is zero.
	DefaultQueueSize = 4096
	// DefaultDialTimeout bounds a dial, TLS handshake included, when
	// TCPConfig.DialTimeout is zero. Inbound TLS handshakes get as long.
	DefaultDialTimeout = 5 * time.Second

	tcpRecvBuffer = 1024
	ioBufferSize  = 64 << 10
	// writeTimeout bounds one batch of writes, so a peer that stops
	// reading without closing is noticed and redialled.
	writeTimeout = 10 * time.Second
	minBackoff   = 50 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

var (
	_ Transport = (*TCP)(nil)
	_ PeerAdder = (*TCP)(nil)
)

// TCPConfig configures ListenTCP.
type TCPConfig struct {
	// Name is this member's name (required). Every frame sent carries it
	// as From; frames whose To is not Name are refused.
	Name string
	// Addr is the address to listen on, e.g. "127.0.0.1:0".
	Addr string
	// Peers maps member names to addresses. An entry for Name itself is
	// ignored, so every member can be given the same map.
	Peers map[string]string
	// TLS, when set, secures both the listener and outbound dials: the
	// same config serves as server and client config, so it needs a
	// certificate valid for both uses, and it gives mutual TLS when it
	// requires client certificates (ClientAuth). Nil means plaintext.
	TLS *tls.Config
	// MaxFrameSize is the largest frame, in bytes after the length
	// prefix, sent or accepted. Zero means DefaultMaxFrameSize.
	MaxFrameSize int
	// QueueSize is the number of frames queued per peer before Send
	// drops. Zero means DefaultQueueSize.
	QueueSize int
	// DialTimeout bounds each dial and TLS handshake. Zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// Logger receives connection errors and refused frames. Nil
	// discards them.
	Logger *slog.Logger
}

// TCP is a Transport over TCP, with optional (mutual) TLS.
//
// Each peer has one outbound connection, owned by a writer goroutine fed
// by a bounded queue: frames are pipelined and flushed whenever the queue
// runs dry, so bursts go out in few syscalls. A lost connection is
// redialled with exponential backoff and jitter, on demand, when there is
// something to send. Each inbound connection has a reader goroutine that
// delivers to the Receive channel. TCP is safe for concurrent use.
type TCP struct {
	name    string
	cfg     TCPConfig
	log     *slog.Logger
	ln      net.Listener
	recv    chan Envelope // buffered tcpRecvBuffer; closed by Close after all readers exit
	ctx     context.Context
	cancel  context.CancelFunc // stops dials, handshakes, backoff waits and deliveries
	wg      sync.WaitGroup
	closing sync.Once

	mu     sync.RWMutex
	closed bool
	peers  map[string]*tcpPeer
	conns  map[net.Conn]struct{} // every open conn, both ways, for Close to cut
}

// tcpPeer is the outbound side of one peer.
type tcpPeer struct {
	name string
	// queue holds encoded frames from encodeFrame. It is bounded, and
	// never closed because Send may race with Close; the writer stops on
	// the transport's context instead.
	queue chan *bytes.Buffer

	mu   sync.Mutex
	addr string
	conn net.Conn // the live outbound conn, nil when disconnected
}

// ListenTCP starts listening on cfg.Addr and returns the transport.
// Peers are dialled lazily, on the first Send to them.
func ListenTCP(cfg TCPConfig) (*TCP, error) {
	if cfg.Name == "" {
		return nil, errors.New("transport: TCPConfig.Name is required")
	}
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen: %w", err)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &TCP{
		name:   cfg.Name,
		cfg:    cfg,
		log:    log.With("member", cfg.Name),
		ln:     ln,
		recv:   make(chan Envelope, tcpRecvBuffer),
		ctx:    ctx,
		cancel: cancel,
		peers:  make(map[string]*tcpPeer),
		conns:  make(map[net.Conn]struct{}),
	}
	for name, addr := range cfg.Peers {
		t.AddPeer(name, addr)
	}
	t.wg.Go(t.acceptLoop)
	return t, nil
}

// Addr returns the address the transport listens on, with the actual
// port when the configured one was 0.
func (t *TCP) Addr() string { return t.ln.Addr().String() }

// AddPeer sets the address of a member. A new address for a known member
// replaces the old one and drops the current connection, so the next
// frame is sent to the new address. AddPeer after Close does nothing.
func (t *TCP) AddPeer(name, addr string) {
	if name == t.name {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if p := t.peers[name]; p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.addr != addr {
			p.addr = addr
			if p.conn != nil {
				hardClose(p.conn) // the writer sees the error and redials
			}
		}
		return
	}
	p := &tcpPeer{name: name, addr: addr, queue: make(chan *bytes.Buffer, t.cfg.QueueSize)}
	t.peers[name] = p
	t.wg.Go(func() { t.writeLoop(p) })
}

// Send encodes envs and queues them on their peers' writers; see
// Transport. From is always this member's name. Envelopes to unknown
// members or to a full queue are dropped. An envelope too large for
// MaxFrameSize is skipped too, but reported: unlike a full queue it will
// never succeed, so Send returns an error wrapping ErrFrameTooLarge after
// queuing the rest. Envelopes addressed to this member itself are
// delivered locally.
func (t *TCP) Send(envs []Envelope) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return ErrClosed
	}
	var firstErr error
	for _, env := range envs {
		if env.To == t.name {
			t.deliverLocal(env)
			continue
		}
		p := t.peers[env.To]
		if p == nil {
			t.log.Debug("transport: dropping envelope", "to", env.To, "err", ErrUnknownPeer)
			continue
		}
		if len(p.queue) == cap(p.queue) {
			continue // full: do not bother encoding
		}
		buf, err := encodeFrame(t.name, env.To, env.Data, t.cfg.MaxFrameSize)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("transport: send to %s: %w", env.To, err)
			}
			continue
		}
		select {
		case p.queue <- buf:
		default:
			putFrameBuf(buf)
		}
	}
	return firstErr
}

// deliverLocal hands an envelope to our own inbox without blocking. The
// caller holds t.mu shared, which keeps Close from closing recv.
func (t *TCP) deliverLocal(env Envelope) {
	env.From = t.name
	env.Data = slices.Clone(env.Data)
	select {
	case t.recv <- env:
	default:
	}
}

// Receive returns the inbox: buffered (1024 envelopes), fed by one reader
// goroutine per inbound connection, closed by Close. It loses nothing
// itself: a full inbox makes the readers wait, which slows the senders
// through TCP flow control and in the end makes their queues drop. Only
// envelopes a member sends to itself are dropped when it is full.
func (t *TCP) Receive() <-chan Envelope { return t.recv }

// Close stops the listener and every goroutine, closes all connections,
// then closes the Receive channel. Queued frames are discarded. It is
// safe to call more than once.
func (t *TCP) Close() error {
	t.closing.Do(func() {
		t.mu.Lock()
		t.closed = true
		conns := make([]net.Conn, 0, len(t.conns))
		for c := range t.conns {
			conns = append(conns, c)
		}
		t.mu.Unlock()
		t.cancel()
		t.ln.Close()
		for _, c := range conns {
			hardClose(c)
		}
		t.wg.Wait()
		close(t.recv)
	})
	return nil
}

// track registers c for Close to cut. It reports false, having closed c,
// when the transport is already closed.
func (t *TCP) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		hardClose(c)
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *TCP) untrack(c net.Conn) {
	hardClose(c)
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

func (t *TCP) acceptLoop() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			// Typically running out of file descriptors: pause rather
			// than spin, and keep serving once it passes.
			t.log.Error("transport: accept", "err", err)
			if !t.sleep(minBackoff) {
				return
			}
			continue
		}
		if t.track(c) {
			t.wg.Go(func() { t.readLoop(c) })
		}
	}
}

// readLoop delivers the frames of one inbound connection until it ends.
// Any bad frame ends the connection: after one, the stream cannot be
// trusted to be in sync, and the peer will redial.
func (t *TCP) readLoop(c net.Conn) {
	defer t.untrack(c)
	remote := c.RemoteAddr().String()
	if tc, ok := c.(*tls.Conn); ok {
		ctx, cancel := context.WithTimeout(t.ctx, t.cfg.DialTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			if t.ctx.Err() == nil {
				t.log.Warn("transport: refused inbound connection: TLS handshake", "remote", remote, "err", err)
			}
			return
		}
	}
	fr := newFrameReader(bufio.NewReaderSize(c, ioBufferSize), t.cfg.MaxFrameSize)
	for {
		env, err := fr.next()
		if err != nil {
			switch {
			case t.ctx.Err() != nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			case errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrMalformedFrame):
				t.log.Error("transport: closing inbound connection: bad frame", "remote", remote, "err", err)
			default:
				t.log.Warn("transport: inbound connection lost", "remote", remote, "err", err)
			}
			return
		}
		if env.To != t.name {
			t.log.Error("transport: closing inbound connection: frame for another member",
				"remote", remote, "from", env.From, "to", env.To, "err", ErrMalformedFrame)
			return
		}
		select {
		case t.recv <- env:
		case <-t.ctx.Done():
			return
		}
	}
}

// writeLoop owns the outbound connection to p. It blocks for the first
// frame of a batch, then writes whatever else is queued without blocking,
// and flushes once the queue is empty: one syscall per burst.
func (t *TCP) writeLoop(p *tcpPeer) {
	var (
		conn        net.Conn
		bw          = bufio.NewWriterSize(nil, ioBufferSize)
		backoff     = minBackoff
		connectedAt time.Time
	)
	defer func() {
		if conn != nil {
			t.dropConn(p, conn)
		}
	}()
	for {
		var buf *bytes.Buffer
		select {
		case buf = <-p.queue:
		case <-t.ctx.Done():
			return
		}
		if conn == nil {
			var err error
			conn, err = t.dial(p)
			if err != nil {
				putFrameBuf(buf)
				if t.ctx.Err() != nil || errors.Is(err, ErrClosed) {
					return
				}
				t.log.Warn("transport: dial", "peer", p.name, "err", err)
				// What queued meanwhile is stale by the time we could
				// connect; Raft resends what still matters.
				t.discardQueue(p)
				if !t.sleep(jitter(backoff)) {
					return
				}
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			bw.Reset(conn)
			connectedAt = time.Now()
		}
		err := t.writeBatch(p, conn, bw, buf)
		if err == nil {
			continue
		}
		if t.ctx.Err() != nil {
			return
		}
		t.log.Warn("transport: connection lost", "peer", p.name, "err", err)
		t.dropConn(p, conn)
		conn = nil
		// A connection that dies young (say, a TLS peer that refuses our
		// certificate after the handshake) must not reset the backoff,
		// or we would redial it in a tight loop.
		if time.Since(connectedAt) > maxBackoff {
			backoff = minBackoff
		}
		if !t.sleep(jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// writeBatch writes buf and everything queued behind it, then flushes.
func (t *TCP) writeBatch(p *tcpPeer, conn net.Conn, bw *bufio.Writer, buf *bytes.Buffer) error {
	if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		putFrameBuf(buf)
		return err
	}
	for {
		_, err := bw.Write(buf.Bytes())
		putFrameBuf(buf)
		if err != nil {
			return err
		}
		select {
		case buf = <-p.queue:
			continue
		default:
		}
		return bw.Flush()
	}
}

// dial connects to p's current address and starts a goroutine that
// watches the connection for the peer closing it.
func (t *TCP) dial(p *tcpPeer) (net.Conn, error) {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	nd := &net.Dialer{Timeout: t.cfg.DialTimeout}
	var (
		c   net.Conn
		err error
	)
	if t.cfg.TLS != nil {
		c, err = (&tls.Dialer{NetDialer: nd, Config: t.cfg.TLS}).DialContext(t.ctx, "tcp", addr)
	} else {
		c, err = nd.DialContext(t.ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if !t.track(c) {
		return nil, ErrClosed
	}
	p.mu.Lock()
	if moved := p.addr; moved != addr {
		// AddPeer moved the peer while we dialled the old address.
		p.mu.Unlock()
		t.untrack(c)
		return nil, fmt.Errorf("peer moved from %s to %s while dialling", addr, moved)
	}
	p.conn = c
	p.mu.Unlock()
	// Peers never write to our outbound connections, so a read returns
	// only when the peer closes it (or a TLS peer rejects us). Closing
	// our end then makes the writer's next write fail and redial,
	// instead of the next frame vanishing into a dead connection.
	t.wg.Go(func() {
		_, err := io.Copy(io.Discard, c)
		if err != nil && !errors.Is(err, net.ErrClosed) && t.ctx.Err() == nil {
			t.log.Warn("transport: peer closed connection", "peer", p.name, "err", err)
		}
		hardClose(c)
	})
	return c, nil
}

func (t *TCP) dropConn(p *tcpPeer, c net.Conn) {
	p.mu.Lock()
	if p.conn == c {
		p.conn = nil
	}
	p.mu.Unlock()
	t.untrack(c)
}

// hardClose closes c without the TLS close_notify alert: sending it can
// block for seconds on a peer that does not read, and we close conns
// while holding locks that Send needs. Frames are self-delimiting, so
// the alert adds nothing.
func hardClose(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	c.Close()
}

func (t *TCP) discardQueue(p *tcpPeer) {
	for {
		select {
		case buf := <-p.queue:
			putFrameBuf(buf)
		default:
			return
		}
	}
}

// sleep waits d, reporting false if the transport closed first.
func (t *TCP) sleep(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.ctx.Done():
		return false
	}
}

// jitter spreads redials over [d/2, d) so peers that lost each other at
// the same moment do not redial in lockstep.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2)
}
