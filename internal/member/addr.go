package member

// addresser is the optional capability of a transport that knows the
// address it listens on (transport.TCP does): found by type assertion,
// so an in-memory transport needs no method for it.
type addresser interface {
	Addr() string
}

// Addr returns the address this member's transport listens on. With the
// default TCP transport (or any Config.Transport that reports its
// address through an Addr() string method) it is the address actually
// bound, so a member opened with Config.Addr "127.0.0.1:0" tells here
// which port it got, to hand to the members that will join it. With a
// transport that does not report one (coordtest's in-memory network) it
// is Config.Addr as given or, when that is empty, this member's address
// in Config.Peers: the one the others use. It is "" if neither names it.
func (n *Node) Addr() string {
	if a, ok := n.tr.(addresser); ok {
		return a.Addr()
	}
	if n.cfg.Addr != "" {
		return n.cfg.Addr
	}
	for _, p := range n.cfg.Peers {
		if p.Name == n.cfg.Name {
			return p.Addr
		}
	}
	return ""
}
