package coord

import (
	"slices"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/gossip"
)

// advertiseClientAddr gossips the address this member serves clients
// on (clientAdvertAddr), and has it announced to the address book, so
// the cell's other members can tell their clients (Members); "" once it
// serves none. A wildcard bind is not dialable and is not told.
func (n *Node) advertiseClientAddr() {
	if n.clients.ctx.Err() != nil {
		return
	}
	n.clients.pokeAnnounce() // into the address book too (client_serve_guard.go)
	if n.gossip == nil {
		return
	}
	a := n.clientAdvertAddr()
	n.gossip.setMeta(func(m *gossip.Meta) { m.ClientAddr = a })
}

// clientAdvertAddr is the address this member tells the cell it serves
// clients on: Config.ClientAddr's listener, else the first of
// ServeClients'; "" while it serves none.
func (n *Node) clientAdvertAddr() string {
	addrs := n.clients.ownAddrs()
	if own := n.ClientAddr(); slices.Contains(addrs, own) {
		return own
	}
	if len(addrs) > 0 {
		return addrs[0]
	}
	return ""
}

// gossipClientAddrs lists the client addresses that live gossip members
// of this cell's Raft configuration advertise, at most
// clientwire.MaxMemberAddrs, each valid for a MembersResult. Metadata
// is authenticated by the cell's gossip keys; a member of another cell,
// or not (or no longer) in the configuration, is left out.
func (n *Node) gossipClientAddrs() []string {
	if n.gossip == nil {
		return nil
	}
	cell := n.raft.CellID()
	if cell == 0 {
		return nil
	}
	conf := n.sm.ConfState()
	var out []string
	for _, m := range n.gossip.g.Members() {
		if len(out) >= clientwire.MaxMemberAddrs {
			break
		}
		mm := m.Meta
		if m.State != gossip.StateAlive || m.BadMeta || mm.Cell != cell || mm.ClientAddr == "" ||
			!slices.Contains(conf.GetVoters(), mm.ID) && !slices.Contains(conf.GetLearners(), mm.ID) ||
			clientwire.CheckMemberAddr(mm.ClientAddr) != nil || slices.Contains(out, mm.ClientAddr) {
			continue
		}
		out = append(out, mm.ClientAddr)
	}
	return out
}
