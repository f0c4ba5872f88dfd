package member

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync/atomic"
	"time"
)

// The client door's bounds beyond those of one connection (clientwire
// bounds those): handshakes in progress, in total and per remote
// address; connections per identity; bytes queued for all clients (the
// clientServer's budget). Its counters are ClientStatus.

// ClientStatus is what the client door holds now and what it has
// refused or cut off since Open (the root's ClientStatus).
type ClientStatus struct {
	Admitted, Pending       int
	Refused                 uint64
	CutSlow, CutIdle        uint64
	QueuedBytes, QueuedPeak int64
}

// doorCounters are the client door's event counters.
type doorCounters struct {
	refused, cutSlow, cutIdle atomic.Uint64
}

// pendingConn is a connection in its handshake.
type pendingConn struct {
	conn net.Conn
	addr string // the remote host: the per-address bound's key
	at   time.Time
	gone bool // left the table: admitted, ended or dropped
}

// pendingTable holds the handshakes in progress, oldest first. Its
// methods are called with clientServer.mu held.
type pendingTable struct {
	all    []*pendingConn
	byAddr map[string]int
}

// add enters conn. When a bound is full, the oldest handshake under it
// is dropped (returned, for the caller to close): under a flood the
// silent connections are the old ones, and each handshake gets the time
// the flood takes to fill the bound again, which one from an address
// that does not flood never shares (it is dropped only when the total
// is full).
func (t *pendingTable) add(conn net.Conn, now time.Time, total, perAddr int) (p, dropped *pendingConn) {
	if t.byAddr == nil {
		t.byAddr = make(map[string]int)
	}
	addr := remoteHost(conn)
	switch {
	case t.byAddr[addr] >= perAddr:
		dropped = t.all[slices.IndexFunc(t.all, func(p *pendingConn) bool { return p.addr == addr })]
	case len(t.all) >= total:
		dropped = t.all[0]
	}
	if dropped != nil {
		t.remove(dropped)
	}
	p = &pendingConn{conn: conn, addr: addr, at: now}
	t.all = append(t.all, p)
	t.byAddr[addr]++
	return p, dropped
}

// remove takes p out of the table, if it is still there.
func (t *pendingTable) remove(p *pendingConn) {
	if p.gone {
		return
	}
	p.gone = true
	if i := slices.Index(t.all, p); i >= 0 {
		t.all = slices.Delete(t.all, i, i+1)
	}
	if t.byAddr[p.addr]--; t.byAddr[p.addr] <= 0 {
		delete(t.byAddr, p.addr)
	}
}

// remoteHost is the host of conn's remote address, or the whole address
// when it has no port.
func remoteHost(conn net.Conn) string {
	a := conn.RemoteAddr()
	if a == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// closeNow closes conn without a TLS close_notify, which would wait on a
// peer that does not read.
func closeNow(conn net.Conn) {
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		_ = nc.NetConn().Close()
	}
	_ = conn.Close()
}

// status reads the door's state and counters.
func (cs *clientServer) status() ClientStatus {
	cs.mu.Lock()
	st := ClientStatus{Admitted: cs.admitted, Pending: len(cs.pending.all)}
	cs.mu.Unlock()
	st.Refused = cs.counts.refused.Load()
	st.CutSlow = cs.counts.cutSlow.Load()
	st.CutIdle = cs.counts.cutIdle.Load()
	st.QueuedBytes, st.QueuedPeak = cs.budget.Queued(), cs.budget.Peak()
	return st
}

// handshake runs a TLS connection's handshake within what is left of the
// client's handshake time, and sets the identity its certificate names;
// a plaintext connection's identity comes with its Hello.
func (cs *clientServer) handshake(conn net.Conn, h *clientHandler) error {
	n := cs.n
	tc, ok := conn.(*tls.Conn)
	if !ok {
		h.plaintext = true
		cs.warn.Do(func() {
			n.cfg.Logger.Warn("serving clients in plaintext: a client's identity is the name it gives, unauthenticated")
		})
		return nil
	}
	ctx, cancel := context.WithDeadline(cs.ctx, h.pending.at.Add(n.cfg.ClientHandshakeTimeout))
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	// The certificate names the client: one its CA signed, or a
	// credential for that name only (client_auth.go).
	id, gen, err := cs.auth.authenticate(tc.ConnectionState())
	if err == nil && gen > 0 {
		if err = cs.auth.admit(h, id, gen, conn); err == nil {
			h.credential = true
		}
	}
	if err != nil {
		cs.auth.refuse(conn.RemoteAddr().String(), err)
		return err
	}
	h.identity = id
	return nil
}
