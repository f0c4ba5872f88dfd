package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"
)

// acceptLoop accepts inbound connections within the caps of
// TCPConfig.MaxConns and MaxConnsPerIP and starts a reader for each.
func (t *TCP) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			// Typically out of file descriptors: back off rather than
			// spin, and keep serving once it passes. Outbound dials do
			// not wait on anything accept holds.
			backoff = min(max(2*backoff, minAcceptBackoff), maxAcceptBackoff)
			if ok, suppressed := t.acceptLog.allow(); ok {
				t.log.Error("transport: accept", "err", err, "retry_in", backoff, "suppressed", suppressed)
			}
			if !sleep(t.ctx, backoff) {
				return
			}
			continue
		}
		backoff = 0
		ip := remoteIP(c)
		if !t.inLimit.acquire(ip) {
			hardClose(c)
			t.logRefused(slog.LevelWarn, "transport: refused inbound connection: too many open",
				"remote", c.RemoteAddr().String(), "err", ErrOverloaded)
			continue
		}
		if !t.track(c) {
			t.inLimit.release(ip)
			return
		}
		t.wg.Go(func() {
			defer t.inLimit.release(ip)
			t.readLoop(c)
		})
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// inConn is the state of one inbound connection. Its reader goroutine
// owns it; only cut is touched by others.
type inConn struct {
	t      *TCP
	raw    net.Conn // as accepted
	c      net.Conn // raw, or the TLS conn over it
	remote string
	leaf   *x509.Certificate // the verified client certificate under TLS
	// from is the sender the connection is bound to: "" until its first
	// frame is accepted, then fixed.
	from string
	// cut is set by RemovePeer, so a frame read meanwhile is not delivered.
	cut atomic.Bool
	// traffic is the bound sender's counters, set with from.
	traffic *peerCounters
	// frameLen is the current frame's length, prefix excluded.
	frameLen int

	authBy   time.Time // the first frame must be complete by then
	frameBy  time.Time // the current frame must be complete by then; zero between frames
	deadline time.Time // last deadline set on c
	idle     bool      // deadline is an idle one
	reserved int64     // bytes of the buffer budget held by the current frame
}

// Read sets the connection's deadline for what is awaited, then reads.
// The frame reader reads through a buffer, so this runs once per read
// from the socket, not once per frame.
func (ic *inConn) Read(p []byte) (int, error) {
	var d time.Time
	idle := false
	switch {
	case ic.from == "" && (ic.frameBy.IsZero() || ic.authBy.Before(ic.frameBy)):
		d = ic.authBy
	case !ic.frameBy.IsZero():
		d = ic.frameBy
	default:
		idle = true
		d = time.Now().Add(ic.t.cfg.IdleTimeout)
		// Moving the deadline by a sliver on every read is wasted work.
		if ic.idle && d.Sub(ic.deadline) < ic.t.cfg.IdleTimeout/16 {
			d = ic.deadline
		}
	}
	ic.idle = idle
	if !d.Equal(ic.deadline) {
		// Writes too: TLS may write (alerts, key updates) inside Read,
		// and a peer that does not read must not hold us there.
		if err := ic.c.SetDeadline(d); err != nil {
			return 0, err
		}
		ic.deadline = d
	}
	return ic.c.Read(p)
}

// begin implements frameGuard: it bounds the time the frame may take,
// and refuses a large frame from a sender not yet authenticated.
func (ic *inConn) begin(n int) error {
	cfg := &ic.t.cfg
	if ic.from == "" && n > cfg.MaxFirstFrameSize {
		return fmt.Errorf("%w: first frame of %d bytes, limit %d before the sender is known",
			ErrFrameTooLarge, n, cfg.MaxFirstFrameSize)
	}
	ic.frameLen = n
	allowed := cfg.FrameTimeout + time.Duration(float64(n)/float64(cfg.MinFrameRate)*float64(time.Second))
	ic.frameBy = time.Now().Add(allowed)
	return nil
}

// grow implements frameGuard: it takes n bytes from the shared budget.
func (ic *inConn) grow(n int) error {
	if !ic.t.budget.reserve(int64(n)) {
		return fmt.Errorf("%w: buffer budget of %d bytes used up", ErrOverloaded, ic.t.budget.limit)
	}
	ic.reserved += int64(n)
	return nil
}

// endFrame gives back what the current frame held.
func (ic *inConn) endFrame() {
	ic.t.budget.release(ic.reserved)
	ic.reserved = 0
	ic.frameBy = time.Time{}
}

// readLoop delivers the frames of one inbound connection until it ends.
// Any bad frame ends the connection: after one, the stream cannot be
// trusted to be in sync, and the peer will redial.
func (t *TCP) readLoop(raw net.Conn) {
	ic := &inConn{
		t:      t,
		raw:    raw,
		c:      raw,
		remote: raw.RemoteAddr().String(),
		authBy: time.Now().Add(t.cfg.HandshakeTimeout),
	}
	var readErr error
	defer func() {
		ic.endFrame()
		t.unbind(ic)
		t.untrack(raw)
		// Reported after unbind, so Connected no longer counts it.
		if readErr != nil && ic.from != "" && !ic.cut.Load() && closedByPeer(readErr) {
			t.peerClosed(ic.from)
		}
	}()
	if t.tls != nil {
		if !t.handshake(ic) {
			return
		}
	}
	small := bufio.NewReaderSize(ic, firstReadBuffer)
	fr := newFrameReader(small, t.cfg.MaxFrameSize)
	fr.guard = ic
	for {
		env, err := fr.next()
		if err != nil {
			readErr = err
			t.logReadError(ic, err)
			return
		}
		first := ic.from == ""
		if err := t.admit(ic, env); err != nil {
			t.logRefused(slog.LevelWarn, "transport: closing inbound connection: frame refused",
				"remote", ic.remote, "from", env.From, "to", env.To, "err", err)
			return
		}
		if first {
			// Now a known member's: read in large gulps from here on.
			// The small buffer drains first, then steps aside, since
			// bufio reads directly into a large enough destination.
			fr.r = bufio.NewReaderSize(small, ioBufferSize)
			if len(env.Data) == 0 {
				ic.endFrame() // the sender's hello
				continue
			}
		}
		if ic.cut.Load() {
			return
		}
		// Counted before delivery, so whoever receives it sees it counted.
		ic.traffic.in(frameHeaderLen + ic.frameLen)
		select {
		case t.recv <- env:
		case <-t.ctx.Done():
			return
		}
		ic.endFrame()
	}
}

// handshake completes the TLS handshake within the first-frame deadline
// and keeps the verified client certificate.
func (t *TCP) handshake(ic *inConn) bool {
	tc := tls.Server(ic.raw, t.tls)
	ic.c = tc
	if err := ic.raw.SetDeadline(ic.authBy); err != nil {
		return false
	}
	ic.deadline = ic.authBy
	ctx, cancel := context.WithDeadline(t.ctx, ic.authBy)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err == nil {
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
			ic.leaf = certs[0]
		} else {
			err = fmt.Errorf("%w: no client certificate", ErrPeerIdentity)
		}
	}
	if err != nil {
		if t.ctx.Err() == nil {
			t.logRefused(slog.LevelWarn, "transport: refused inbound connection: TLS handshake",
				"remote", ic.remote, "err", err)
		}
		return false
	}
	return true
}

// admit checks env against the connection's sender. The first frame
// binds the connection to its From, which must be a known peer (or one
// the stranger gate admits) and, under TLS, be named by the client
// certificate; every later frame must come from the same member. Every
// frame must be for this member.
func (t *TCP) admit(ic *inConn, env Envelope) error {
	if env.To != t.name {
		return fmt.Errorf("%w: frame for another member", ErrMalformedFrame)
	}
	if ic.from != "" {
		if env.From != ic.from {
			return fmt.Errorf("%w: connection of %q carries a frame from %q", ErrPeerIdentity, ic.from, env.From)
		}
		return nil
	}
	if ic.leaf != nil {
		if err := t.verify(env.From, ic.leaf); err != nil {
			return peerIdentityError(err)
		}
	}
	t.mu.RLock()
	known := t.peers[env.From] != nil
	t.mu.RUnlock()
	// Asked without the lock: the gate may read the member's store.
	stranger := false
	if gate := t.strangers.Load(); !known && gate != nil {
		stranger = (*gate)(env.From)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	switch p := t.peers[env.From]; {
	case p != nil:
		ic.traffic = &p.traffic
	case stranger:
		ic.traffic = &t.strangerTraffic
	default:
		return fmt.Errorf("%w: %q", ErrUnknownPeer, env.From)
	}
	set := t.inbound[env.From]
	if set == nil {
		set = make(map[*inConn]struct{})
		t.inbound[env.From] = set
	}
	set[ic] = struct{}{}
	ic.from = env.From
	return nil
}

func (t *TCP) unbind(ic *inConn) {
	if ic.from == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if set := t.inbound[ic.from]; set != nil {
		delete(set, ic)
		if len(set) == 0 {
			delete(t.inbound, ic.from)
		}
	}
}

func (t *TCP) logReadError(ic *inConn, err error) {
	var ne net.Error
	switch {
	case t.ctx.Err() != nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), ic.cut.Load():
	case errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrMalformedFrame), errors.Is(err, ErrOverloaded):
		t.logRefused(slog.LevelError, "transport: closing inbound connection: bad frame",
			"remote", ic.remote, "from", ic.from, "err", err)
	case errors.As(err, &ne) && ne.Timeout():
		switch {
		case ic.from == "":
			t.logRefused(slog.LevelWarn, "transport: closing inbound connection: no valid frame in time",
				"remote", ic.remote, "timeout", t.cfg.HandshakeTimeout)
		case !ic.frameBy.IsZero():
			t.logRefused(slog.LevelWarn, "transport: closing inbound connection: frame incomplete in time",
				"remote", ic.remote, "from", ic.from)
		default:
			// A member that went away; it redials when it has something to say.
			t.log.Debug("transport: closing idle inbound connection", "remote", ic.remote, "from", ic.from)
		}
	default:
		t.logRefused(slog.LevelWarn, "transport: inbound connection lost", "remote", ic.remote, "from", ic.from, "err", err)
	}
}
