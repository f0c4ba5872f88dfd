package coordcell

import (
	"sync/atomic"

	"github.com/coordcell/coord/transport"
)

// cuttable wraps a member's TCP transport so the bench can crash the
// member from outside: once cut, everything it sends is dropped, so to
// its peers it is gone at that instant (no leadership hand-over, no last
// heartbeat), as if its process had been killed. coord has no exported
// crash, and Close hands leadership over first.
type cuttable struct {
	transport.Transport
	cut atomic.Bool
}

// Send drops envs once the transport is cut.
func (c *cuttable) Send(envs []transport.Envelope) error {
	if c.cut.Load() {
		return nil
	}
	return c.Transport.Send(envs)
}

// kill crashes the member: nothing it sends goes out any more, and its
// connections close, as the kernel closes a killed process's sockets, so
// its peers see them end (transport.PeerWatcher).
func (c *cuttable) kill() {
	c.cut.Store(true)
	c.Transport.Close()
}

// OnPeerDown passes the wrapped transport's PeerWatcher through, so a
// member learns at once that a crashed peer's connections ended.
func (c *cuttable) OnPeerDown(f func(peer string)) {
	if w, ok := c.Transport.(transport.PeerWatcher); ok {
		w.OnPeerDown(f)
	}
}

// Connected passes the wrapped transport's PeerWatcher through.
func (c *cuttable) Connected(peer string) bool {
	w, ok := c.Transport.(transport.PeerWatcher)
	return ok && w.Connected(peer)
}
