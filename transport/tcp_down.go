package transport

import (
	"errors"
	"io"
	"syscall"
)

// OnPeerDown implements PeerWatcher: f hears of every bound inbound
// connection and every established outbound one that the peer ended
// (end of stream or reset). Connections this transport closes itself
// (Close, RemovePeer, a new address, a refused or idle connection, a
// failed write) are not reported.
func (t *TCP) OnPeerDown(f func(peer string)) {
	if f == nil {
		t.onDown.Store(nil)
		return
	}
	t.onDown.Store(&f)
}

// Connected implements PeerWatcher: an inbound connection bound to peer
// is open, or our outbound connection to it is established and the peer
// has not closed it.
func (t *TCP) Connected(peer string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if len(t.inbound[peer]) > 0 {
		return true
	}
	p := t.peers[peer]
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn != nil
}

// peerClosed reports the end of a connection to or from peer, once the
// connection no longer counts in Connected.
func (t *TCP) peerClosed(peer string) {
	if t.ctx.Err() != nil {
		return
	}
	t.log.Debug("transport: peer closed its connection", "peer", peer)
	if f := t.onDown.Load(); f != nil {
		(*f)(peer)
	}
}

// closedByPeer tells whether a read ended because the other side closed
// or reset the connection, rather than by our own close, a timeout or a
// bad frame.
func closedByPeer(err error) bool {
	return err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET)
}
