package member

import (
	"time"

	"github.com/coordcell/coord/internal/spi"
)

// What the root's tests read of a member, exported here because the
// root's export_test.go cannot reach this package's unexported names.

// CellID is the cell ID founders derive from their configuration.
func CellID(name string, peers []Peer) uint64 { return cellID(name, peers) }

// StartClosing marks the member as closing, the first step of Close,
// without taking the next ones: its client connections stay open (as
// they do for up to a second while a gossiping member leaves) and it
// answers requests with ErrClosed.
func (n *Node) StartClosing() { n.cancelClose() }

// SessionsUnheard returns every live session in the member's applied
// state with its unheard time.
func (n *Node) SessionsUnheard() map[int64]time.Duration {
	infos, err := n.sm.Sessions()
	if err != nil {
		return nil
	}
	out := make(map[int64]time.Duration, len(infos))
	for _, si := range infos {
		out[si.ID] = time.Duration(si.Unheard)
	}
	return out
}

// OwnerSessions returns how many live sessions the client identity holds
// in the member's applied state.
func (n *Node) OwnerSessions(identity string) int64 {
	return n.sm.OwnerSessions(spi.ClientOwnerPrefix + identity)
}

// ClientCertsRefused counts the client certificates the client port
// refused.
func (n *Node) ClientCertsRefused() uint64 { return n.clients.auth.refused.Load() }

// KeepAliveBatches counts the keep-alive messages the member sent to the
// leader.
func (n *Node) KeepAliveBatches() uint64 { return n.sessions.batches.Load() }

// ClientServeAddrs is what the member answers a client's Members with.
func (n *Node) ClientServeAddrs() []string { return n.clients.ownAddrs() }
