package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for zero fields of TCPConfig, and fixed tuning.
const (
	// DefaultQueueSize is the per-peer send queue length when
	// TCPConfig.QueueSize is zero.
	DefaultQueueSize = 4096
	// DefaultDialTimeout bounds a dial, TLS handshake included, when
	// TCPConfig.DialTimeout is zero.
	DefaultDialTimeout = 5 * time.Second
	// DefaultHandshakeTimeout is TCPConfig.HandshakeTimeout when zero.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultFrameTimeout is TCPConfig.FrameTimeout when zero.
	DefaultFrameTimeout = 10 * time.Second
	// DefaultMinFrameRate is TCPConfig.MinFrameRate when zero: 1 MiB/s,
	// so a frame of the default 16 MiB limit gets 26 s in all.
	DefaultMinFrameRate = 1 << 20
	// DefaultIdleTimeout is TCPConfig.IdleTimeout when zero. Live members
	// send heartbeats many times a second, and a closed connection is
	// redialled on demand.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConns is TCPConfig.MaxConns when zero.
	DefaultMaxConns = 256
	// DefaultMaxConnsPerIP is TCPConfig.MaxConnsPerIP when zero.
	DefaultMaxConnsPerIP = 32
	// DefaultMaxFirstFrameSize is TCPConfig.MaxFirstFrameSize when zero.
	DefaultMaxFirstFrameSize = 64 << 10
	// MinBufferBudget is the smallest default TCPConfig.BufferBudget: the
	// default is the larger of it and 4 × MaxFrameSize.
	MinBufferBudget = 64 << 20

	tcpRecvBuffer = 1024
	ioBufferSize  = 64 << 10
	// firstReadBuffer is the read buffer of a connection until its first
	// frame is accepted: hundreds of idle strangers must not cost 64 KiB
	// each.
	firstReadBuffer = 4 << 10
	// writeTimeout bounds one batch of writes, so a peer that stops
	// reading without closing is noticed and redialled.
	writeTimeout     = 10 * time.Second
	minBackoff       = 50 * time.Millisecond
	maxBackoff       = 2 * time.Second
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
	// Refused connections and accept errors log at most logBurst lines
	// per logInterval each, then a count of what was suppressed.
	logBurst    = 5
	logInterval = 10 * time.Second
)

var (
	_ Transport     = (*TCP)(nil)
	_ PeerAdder     = (*TCP)(nil)
	_ PeerRemover   = (*TCP)(nil)
	_ StatsReporter = (*TCP)(nil)
	_ PeerWatcher   = (*TCP)(nil)
	_ StrangerGate  = (*TCP)(nil)
)

// TCPConfig configures ListenTCP. Only Name is required; zero fields get
// the defaults named in their comments.
//
// Security: a member accepts frames only from known peers (those in
// Peers or added with AddPeer), or senders the stranger gate admits
// (AdmitStrangers), over a connection bound to the one member its first
// frame names. With TLS or Secret, that member must be
// the one the connection's verified client certificate names (see
// VerifyPeer), and a dialled peer's server certificate must name it too.
// Without either, anyone who reaches the port can claim to be a member:
// ListenTCP logs a warning then, and the port must be reachable by
// members only.
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
	// certificate valid for both uses, and ClientAuth must be
	// tls.RequireAndVerifyClientCert (mutual TLS), or ListenTCP fails
	// with ErrConfig. Servers are verified against RootCAs and by name,
	// not by the address dialled: see VerifyPeer. Nil means no TLS.
	TLS *tls.Config
	// Secret, when set, derives mutual TLS from a secret shared by the
	// cell instead (see SecretTLS); at least MinSecretLen bytes, or
	// ListenTCP fails with ErrWeakSecret. Secret and TLS together fail
	// with ErrConfig.
	Secret []byte
	// VerifyPeer decides whether a peer's verified certificate (leaf)
	// names member name, for inbound connections (against the first
	// frame's From) and outbound ones (against the peer dialled). Nil
	// means DefaultVerifyPeer: a DNS SAN, URI SAN or common name equal to
	// name.
	VerifyPeer func(name string, leaf *x509.Certificate) error
	// MaxFrameSize is the largest frame, in bytes after the length
	// prefix, sent or accepted. Zero means DefaultMaxFrameSize.
	MaxFrameSize int
	// MaxFirstFrameSize is the largest frame accepted on a connection
	// before its sender is authenticated (its first frame), so strangers
	// cannot take the buffer budget. Zero means DefaultMaxFirstFrameSize.
	MaxFirstFrameSize int
	// QueueSize is the number of frames queued per peer before Send
	// drops. Zero means DefaultQueueSize.
	QueueSize int
	// DialTimeout bounds each dial and its TLS handshake. Zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// HandshakeTimeout is how long an inbound connection has, from
	// accept, to complete its TLS handshake and deliver its first valid
	// frame; it is closed otherwise. Zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// FrameTimeout and MinFrameRate bound a frame's arrival: once its
	// length prefix is in, the rest of an n-byte frame must arrive within
	// FrameTimeout + n/MinFrameRate seconds, or the connection is closed.
	// Zero means DefaultFrameTimeout and DefaultMinFrameRate (bytes/s).
	FrameTimeout time.Duration
	MinFrameRate int
	// IdleTimeout closes an inbound connection that brings no frame for
	// that long. Zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxConns and MaxConnsPerIP cap the inbound connections open at
	// once, in total and from one remote IP; a connection over a cap is
	// closed as soon as it is accepted. Zero means DefaultMaxConns and
	// DefaultMaxConnsPerIP. Outbound connections do not count.
	MaxConns      int
	MaxConnsPerIP int
	// BufferBudget bounds the bytes, across all inbound connections, held
	// in frames being received or waiting for room in the Receive
	// channel; a connection whose frame would exceed it is closed. Zero
	// means the larger of MinBufferBudget and 4 × MaxFrameSize.
	BufferBudget int64
	// Logger receives connection errors and refused frames. Refusals are
	// rate limited. Nil discards everything.
	Logger *slog.Logger
}

// TCP is a Transport over TCP, with optional mutual TLS.
//
// Each peer has one outbound connection, owned by a writer goroutine fed
// by a bounded queue: frames are pipelined and flushed whenever the queue
// runs dry, so bursts go out in few syscalls. A lost connection is
// redialled with exponential backoff and jitter, on demand, when there is
// something to send. Each outbound connection starts with a hello frame
// (no data, not delivered) that binds it to this member at the receiver.
// Each inbound connection has a reader goroutine that delivers to the
// Receive channel, within the bounds of TCPConfig. TCP is safe for
// concurrent use.
type TCP struct {
	name    string
	cfg     TCPConfig
	tls     *tls.Config // cfg.TLS, or derived from cfg.Secret; nil = plaintext
	verify  func(name string, leaf *x509.Certificate) error
	log     *slog.Logger
	ln      net.Listener
	recv    chan Envelope // buffered tcpRecvBuffer; closed by Close after all readers exit
	ctx     context.Context
	cancel  context.CancelFunc // stops dials, handshakes, backoff waits and deliveries
	wg      sync.WaitGroup
	closing sync.Once

	inLimit    *connLimiter
	budget     *byteBudget
	refusedLog *logLimiter
	acceptLog  *logLimiter
	refused    atomic.Int64  // connections refused or closed for cause; tests read it
	connErrs   atomic.Uint64 // failed dials and lost outbound connections (Stats)
	dropped    atomic.Uint64 // envelopes dropped (Stats)
	onDown     atomic.Pointer[func(peer string)]
	strangers  atomic.Pointer[func(name string) bool] // AdmitStrangers
	// strangerTraffic counts the frames of senders admitted by the
	// stranger gate, which have no peer of their own yet.
	strangerTraffic peerCounters

	mu      sync.RWMutex
	closed  bool
	peers   map[string]*tcpPeer
	conns   map[net.Conn]struct{}           // every open conn, both ways, for Close to cut
	inbound map[string]map[*inConn]struct{} // inbound conns by bound sender, for RemovePeer to cut
}

// tcpPeer is the outbound side of one peer.
type tcpPeer struct {
	name string
	// queue holds encoded frames from encodeFrame. It is bounded, and
	// never closed because Send may race with Close; the writer stops on
	// ctx instead.
	queue chan *bytes.Buffer
	// hello is the first frame written on each new connection.
	hello []byte
	// ctx ends with the transport or when the peer is removed.
	ctx    context.Context
	cancel context.CancelFunc

	// traffic counts frames both ways: out by the writer, in by the
	// readers of connections bound to this peer.
	traffic peerCounters

	mu   sync.Mutex
	addr string
	conn net.Conn // the live outbound conn, nil when disconnected
}

// ListenTCP starts listening on cfg.Addr and returns the transport.
// Peers are dialled lazily, on the first Send to them.
func ListenTCP(cfg TCPConfig) (*TCP, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: TCPConfig.Name is required", ErrConfig)
	}
	tlsCfg, err := cellTLS(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen: %w", err)
	}
	return newTCP(cfg, tlsCfg, ln), nil
}

// cellTLS checks the security settings of cfg and returns the TLS
// configuration to use, nil for plaintext.
func cellTLS(cfg TCPConfig) (*tls.Config, error) {
	switch {
	case cfg.Secret != nil && cfg.TLS != nil:
		return nil, fmt.Errorf("%w: Secret and TLS are exclusive", ErrConfig)
	case cfg.Secret != nil:
		return SecretTLS(cfg.Secret, cfg.Name)
	case cfg.TLS != nil && cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert:
		// Without a verified client certificate nothing proves who a
		// sender is (invariant 11 in ARCHITECTURE.md).
		return nil, fmt.Errorf("%w: TLS.ClientAuth must be tls.RequireAndVerifyClientCert", ErrConfig)
	}
	return cfg.TLS, nil
}

// newTCP starts a transport on ln, with cfg's zero fields defaulted.
func newTCP(cfg TCPConfig, tlsCfg *tls.Config, ln net.Listener) *TCP {
	withDefaults(&cfg)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("member", cfg.Name)
	if tlsCfg == nil {
		log.Warn("transport: no TLS or Secret: frames are not authenticated, anyone who reaches the port can speak for the cell; "+
			"keep it reachable by members only (firewall or private network), or set TCPConfig.Secret or TLS",
			"addr", ln.Addr().String())
	}
	verify := cfg.VerifyPeer
	if verify == nil {
		verify = DefaultVerifyPeer
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &TCP{
		name:       cfg.Name,
		cfg:        cfg,
		tls:        tlsCfg,
		verify:     verify,
		log:        log,
		ln:         ln,
		recv:       make(chan Envelope, tcpRecvBuffer),
		ctx:        ctx,
		cancel:     cancel,
		inLimit:    newConnLimiter(cfg.MaxConns, cfg.MaxConnsPerIP),
		budget:     &byteBudget{limit: cfg.BufferBudget},
		refusedLog: newLogLimiter(logBurst, logInterval),
		acceptLog:  newLogLimiter(logBurst, logInterval),
		peers:      make(map[string]*tcpPeer),
		conns:      make(map[net.Conn]struct{}),
		inbound:    make(map[string]map[*inConn]struct{}),
	}
	for name, addr := range cfg.Peers {
		t.AddPeer(name, addr)
	}
	t.wg.Go(t.acceptLoop)
	return t
}

func withDefaults(cfg *TCPConfig) {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MaxFrameSize, DefaultMaxFrameSize)
	def(&cfg.MaxFirstFrameSize, DefaultMaxFirstFrameSize)
	def(&cfg.QueueSize, DefaultQueueSize)
	def(&cfg.MinFrameRate, DefaultMinFrameRate)
	def(&cfg.MaxConns, DefaultMaxConns)
	def(&cfg.MaxConnsPerIP, DefaultMaxConnsPerIP)
	defDur(&cfg.DialTimeout, DefaultDialTimeout)
	defDur(&cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	defDur(&cfg.FrameTimeout, DefaultFrameTimeout)
	defDur(&cfg.IdleTimeout, DefaultIdleTimeout)
	if cfg.BufferBudget <= 0 {
		cfg.BufferBudget = max(MinBufferBudget, 4*int64(cfg.MaxFrameSize))
	}
}

// Addr returns the address the transport listens on, with the actual
// port when the configured one was 0.
func (t *TCP) Addr() string { return t.ln.Addr().String() }

// AddPeer sets the address of a member and makes it a known peer, whose
// frames are accepted. A new address for a known member replaces the old
// one and drops the current connection, so the next frame is sent to the
// new address. AddPeer after Close does nothing.
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
	hello, err := encodeFrame(t.name, name, nil, t.cfg.MaxFrameSize)
	if err != nil {
		t.log.Error("transport: cannot add peer", "peer", name, "err", err)
		return
	}
	p := &tcpPeer{
		name:  name,
		addr:  addr,
		queue: make(chan *bytes.Buffer, t.cfg.QueueSize),
		hello: bytes.Clone(hello.Bytes()),
	}
	putFrameBuf(hello)
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	t.peers[name] = p
	t.wg.Go(func() { t.writeLoop(p) })
}

// AdmitStrangers sets the gate that lets senders that are not known
// peers deliver frames (see StrangerGate). Their connections are bound
// to them as a peer's are, so RemovePeer cuts them too.
func (t *TCP) AdmitStrangers(f func(name string) bool) {
	if f == nil {
		t.strangers.Store(nil)
		return
	}
	t.strangers.Store(&f)
}

// RemovePeer forgets a member: its outbound connection and queue are
// dropped, its inbound connections cut, and its frames refused from then
// on, until AddPeer adds it again. Frames of its already received are
// still delivered.
func (t *TCP) RemovePeer(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[name]; p != nil {
		delete(t.peers, name)
		p.cancel()
		p.mu.Lock()
		if p.conn != nil {
			hardClose(p.conn)
		}
		p.mu.Unlock()
	}
	for ic := range t.inbound[name] {
		ic.cut.Store(true)
		hardClose(ic.raw)
	}
	delete(t.inbound, name)
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
			t.dropped.Add(1)
			t.log.Debug("transport: dropping envelope", "to", env.To, "err", ErrUnknownPeer)
			continue
		}
		if len(p.queue) == cap(p.queue) {
			t.dropped.Add(1)
			continue // full: do not bother encoding
		}
		buf, err := encodeFrame(t.name, env.To, env.Data, t.cfg.MaxFrameSize)
		if err != nil {
			t.dropped.Add(1)
			if firstErr == nil {
				firstErr = fmt.Errorf("transport: send to %s: %w", env.To, err)
			}
			continue
		}
		select {
		case p.queue <- buf:
		default:
			t.dropped.Add(1)
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
		t.dropped.Add(1)
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

// logRefused logs a refused or failed inbound connection, rate limited.
func (t *TCP) logRefused(level slog.Level, msg string, args ...any) {
	t.refused.Add(1)
	ok, suppressed := t.refusedLog.allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	t.log.Log(context.Background(), level, msg, args...)
}

// sleep waits d, reporting false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var errMoved = errors.New("peer moved while dialling")
