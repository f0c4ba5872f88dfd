package transport

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"
)

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
		case <-p.ctx.Done():
			return
		}
		if conn == nil {
			var err error
			conn, err = t.dial(p)
			if err != nil {
				putFrameBuf(buf)
				t.dropped.Add(1)
				if p.ctx.Err() != nil || errors.Is(err, ErrClosed) {
					return
				}
				t.connErrs.Add(1)
				t.log.Warn("transport: dial", "peer", p.name, "err", err)
				// What queued meanwhile is stale by the time we could
				// connect; Raft resends what still matters.
				t.discardQueue(p)
				if !sleep(p.ctx, jitter(backoff)) {
					return
				}
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			bw.Reset(conn)
			// Buffered with the first batch, so it costs no syscall.
			_, _ = bw.Write(p.hello)
			connectedAt = time.Now()
		}
		err := t.writeBatch(p, conn, bw, buf)
		if err == nil {
			continue
		}
		if p.ctx.Err() != nil {
			return
		}
		t.connErrs.Add(1)
		t.log.Warn("transport: connection lost", "peer", p.name, "err", err)
		t.dropConn(p, conn)
		conn = nil
		// A connection that dies young (say, a TLS peer that refuses our
		// certificate after the handshake) must not reset the backoff,
		// or we would redial it in a tight loop.
		if time.Since(connectedAt) > maxBackoff {
			backoff = minBackoff
		}
		if !sleep(p.ctx, jitter(backoff)) {
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
		n, err := bw.Write(buf.Bytes())
		putFrameBuf(buf)
		if err != nil {
			return err
		}
		p.traffic.out(n)
		select {
		case buf = <-p.queue:
			continue
		default:
		}
		return bw.Flush()
	}
}

// dial connects to p's current address and starts a goroutine that
// watches the connection for the peer closing it. With TLS, the server's
// certificate must name p (see peerClientTLS).
func (t *TCP) dial(p *tcpPeer) (net.Conn, error) {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	nd := &net.Dialer{Timeout: t.cfg.DialTimeout}
	var (
		c   net.Conn
		err error
	)
	if t.tls != nil {
		cfg := peerClientTLS(t.tls, p.name, t.verify)
		c, err = (&tls.Dialer{NetDialer: nd, Config: cfg}).DialContext(p.ctx, "tcp", addr)
	} else {
		c, err = nd.DialContext(p.ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if !t.track(c) {
		return nil, ErrClosed
	}
	p.mu.Lock()
	if p.ctx.Err() != nil {
		// RemovePeer ran while we dialled.
		p.mu.Unlock()
		t.untrack(c)
		return nil, ErrClosed
	}
	if moved := p.addr; moved != addr {
		// AddPeer moved the peer while we dialled the old address.
		p.mu.Unlock()
		t.untrack(c)
		return nil, fmt.Errorf("%w: from %s to %s", errMoved, addr, moved)
	}
	p.conn = c
	p.mu.Unlock()
	// Peers never write to our outbound connections, so a read returns
	// only when the peer closes it (or a TLS peer rejects us). Closing
	// our end then makes the writer's next write fail and redial,
	// instead of the next frame vanishing into a dead connection.
	t.wg.Go(func() {
		_, err := io.Copy(io.Discard, c)
		if err != nil && !errors.Is(err, net.ErrClosed) && p.ctx.Err() == nil {
			t.log.Warn("transport: peer closed connection", "peer", p.name, "err", err)
		}
		hardClose(c)
		if p.ctx.Err() != nil || !closedByPeer(err) {
			return // we closed it (a failed write, a move, Close), or TLS refused us
		}
		// Not established any more, whether or not the writer has noticed.
		p.mu.Lock()
		ours := p.conn == c
		if ours {
			p.conn = nil
		}
		p.mu.Unlock()
		if ours {
			t.peerClosed(p.name)
		}
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

func (t *TCP) discardQueue(p *tcpPeer) {
	for {
		select {
		case buf := <-p.queue:
			putFrameBuf(buf)
			t.dropped.Add(1)
		default:
			return
		}
	}
}

// jitter spreads redials over [d/2, d) so peers that lost each other at
// the same moment do not redial in lockstep.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2)
}
