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
