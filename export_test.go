package coord

import (
	"context"
	"time"

	"github.com/coordcell/coord/internal/lockq"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/raftnode"
)

// CellID is the cell ID founders derive from their configuration.
func CellID(name string, peers []Peer) uint64 { return cellID(name, peers) }

// IDFromName is a member's Raft ID.
func IDFromName(name string) uint64 { return raftnode.IDFromName(name) }

// QueueProbe counts the waits and wake-ups of the waiters of one lock or
// election queue, on the members it was registered with, so tests can
// show that a release wakes one waiter and wait for a waiter to be parked
// without sleeping.
type QueueProbe struct {
	prefix string
	nodes  []*Node
	p      *spi.Probe
}

// ProbeLock starts counting for lock name on nodes; Close stops.
func ProbeLock(name string, nodes ...*Node) *QueueProbe {
	return newProbe(lockq.LockPrefix(name), nodes)
}

// ProbeElection starts counting for election group on nodes; Close stops.
func ProbeElection(group string, nodes ...*Node) *QueueProbe {
	return newProbe(lockq.ElectionPrefix(group), nodes)
}

func newProbe(prefix string, nodes []*Node) *QueueProbe {
	p := spi.NewProbe()
	for _, n := range nodes {
		n.probes.Register(prefix, p)
	}
	return &QueueProbe{prefix: prefix, nodes: nodes, p: p}
}

// Close stops counting.
func (p *QueueProbe) Close() {
	for _, n := range p.nodes {
		n.probes.Unregister(p.prefix)
	}
}

// Counts returns how often a waiter began waiting (found itself blocked
// and started watching) and woke up (a watched blocker went, so it read
// the queue again).
func (p *QueueProbe) Counts() (waits, wakes int) {
	c, _ := p.p.Counts()
	return c[spi.ProbeWait], c[spi.ProbeWake]
}

// Relists returns how often Observe's watch ended and it read the group
// again (history compacted, or it fell behind).
func (p *QueueProbe) Relists() int {
	c, _ := p.p.Counts()
	return c[spi.ProbeRelist]
}

// WaitFor waits until cond holds for the counts, or ctx ends.
func (p *QueueProbe) WaitFor(ctx context.Context, cond func(waits, wakes int) bool) error {
	for {
		c, changed := p.p.Counts()
		if cond(c[spi.ProbeWait], c[spi.ProbeWake]) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// StartClosing marks n as closing, the first step of Close, without
// taking the next ones: its client connections stay open (as they do
// for up to a second while a gossiping member leaves) and it answers
// requests with ErrClosed.
func (n *Node) StartClosing() { n.cancelClose() }

// SessionsUnheard returns every live session in n's applied state with
// its unheard time (how long leaders have gone without hearing from it).
func SessionsUnheard(n *Node) map[SessionID]time.Duration {
	infos, err := n.sm.Sessions()
	if err != nil {
		return nil
	}
	out := make(map[SessionID]time.Duration, len(infos))
	for _, si := range infos {
		out[SessionID(si.ID)] = time.Duration(si.Unheard)
	}
	return out
}

// OwnerSessions returns how many live sessions the client identity holds
// in n's applied state.
func OwnerSessions(n *Node, identity string) int64 {
	return n.sm.OwnerSessions(clientOwnerPrefix + identity)
}

// ClientCertsRefused counts the client certificates n's client port
// refused.
func ClientCertsRefused(n *Node) uint64 { return n.clients.auth.refused.Load() }
