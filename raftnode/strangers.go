package raftnode

import (
	"errors"
	"fmt"
	"sync"

	"github.com/coordcell/coord/transport"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Strangers: members this one has not heard of yet.
//
// A member learns of a new member when the conf change that adds it
// applies here. One that was down, paused or cut off when the change
// committed lacks it: its address book does not know the new member, and
// if that one leads, the entry that would introduce it is exactly what
// it cannot deliver. So a member admits a stranger's word, provisionally,
// when all of these hold (admitStranger):
//
//   - the transport authenticated the name (with TLS, the certificate
//     names it; the TCP transport asks Node.mayBeStranger before it
//     delivers anything from a name it does not know);
//   - the header carries this member's cell ID, which must be known;
//   - the message's Raft ID is the one the cell derives from the name
//     (IDFromName: members are added under it), and the address book
//     gives that ID to nobody else;
//   - this member never saw that ID removed (a removed member is told
//     so instead, standing.go);
//   - it is what a leader or a candidate sends a member that lags: an
//     append, a heartbeat, a snapshot (and its chunks, once the stranger
//     is the leader Raft follows), a vote or pre-vote request, or the
//     stranger's address (kindPeerAddr). Not MsgTimeoutNow: a hand-over
//     to a member that has not even applied its leader's addition gains
//     nothing, and the leader keeps leading if it fails. Not proposals,
//     reads, responses or notices: a lagging member never asked a
//     stranger for anything;
//   - this member is out of touch with its leader: it knows none, it has
//     not heard it for a contact window, or the stranger is the leader
//     Raft now follows. A member that hears its leader has nothing to
//     learn from a stranger, so one cannot unsettle a healthy member;
//   - the table of strangers has room (maxStrangers).
//
// Every other check of validate.go still applies. The table is used only
// to address answers (and to name the sender in those checks): it is
// never the membership. Raft's configuration and the address book change
// only when the conf change applies, which also removes the stranger
// from the table; an entry not confirmed so within strangerTTLElections
// election timeouts of its last admitted message is forgotten, with the
// transport peer made for it.
//
// Answers need the stranger's address (the in-memory transport routes by
// name; TCP dials). A member that sends a leader's or a candidate's
// message to a peer it has not heard from lately sends its own address
// first (kindPeerAddr, the one the membership records for it), at most
// once a heartbeat interval per peer: about 45 bytes, only towards peers
// that are silent anyway. The stranger's table entry keeps the address
// and the driver adds it to the transport (Ready.Peers). Under TLS the
// TCP transport checks that the server it dials holds a certificate
// naming the member it dials (peerClientTLS): an address that lies only
// fails to connect, and the member stays as lagging as it was.

const (
	// maxStrangers bounds the strangers admitted at once.
	maxStrangers = 16
	// strangerTTLElections is how long, in election timeouts since its
	// last admitted message, a stranger stays in the table.
	strangerTTLElections = 3
)

// Why a stranger's envelope is refused.
var (
	errDropStranger      = errors.New("raftnode: a sender that is not a member may not send this")
	errDropRemovedSender = errors.New("raftnode: sender was removed from the cell")
	errDropInContact     = errors.New("raftnode: a sender that is not a member speaks while this member hears its leader")
	errDropStrangers     = errors.New("raftnode: too many senders that are not members")
)

// stranger is one provisionally admitted sender.
type stranger struct {
	name string
	id   uint64
	addr string // "" until it sends one
	seen uint64 // the core's tick of its last admitted envelope
}

// strangers is the table of provisionally admitted senders. The core's
// driver adds and expires entries; the apply side removes those the
// address book now holds; the snapshot receiver looks names up.
type strangers struct {
	mu sync.Mutex
	m  map[string]*stranger
	// told is the driver's: peer ID -> tick this member last sent it its
	// own address.
	told map[uint64]uint64
}

// peerChange is a transport peer the driver adds (a stranger's address)
// or removes (an expired stranger's).
type peerChange struct {
	name, addr string
	remove     bool
}

func (s *strangers) init() {
	s.m = make(map[string]*stranger)
	s.told = make(map[uint64]uint64)
}

func (s *strangers) name(id uint64) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.m {
		if st.id == id {
			return st.name, true
		}
	}
	return "", false
}

func (s *strangers) id(name string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[name]; ok {
		return st.id, true
	}
	return 0, false
}

// forget drops the strangers the address book now knows by name.
func (s *strangers) forget(known func(name string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.m {
		if known(name) {
			delete(s.m, name)
		}
	}
}

// idOf returns the Raft ID the cell derives from a member's name.
func (c *core) idOf(name string) uint64 {
	if c.cfg.IDOf != nil {
		return c.cfg.IDOf(name)
	}
	return IDFromName(name)
}

// peerName returns the name of member or admitted stranger id.
func (c *core) peerName(id uint64) (string, bool) {
	if name, ok := c.book.name(id); ok {
		return name, true
	}
	return c.strangers.name(id)
}

// admitStranger decides whether an envelope from from, a name the
// address book does not know, may be looked at (see the rules above),
// records the stranger if so, and returns its Raft ID.
func (c *core) admitStranger(from string, d decoded) (uint64, error) {
	if from == c.name {
		return 0, errDropSender
	}
	mine := c.ident.cell.Load()
	if mine == 0 || d.cell != mine {
		return 0, fmt.Errorf("%w: cell %016x, this member's is %016x", errDropCell, d.cell, mine)
	}
	id := c.idOf(from)
	if id == c.id {
		return 0, errDropFrom
	}
	if _, taken := c.book.name(id); taken {
		return 0, errDropFrom // the ID of a member of another name
	}
	_, known := c.strangers.id(from)
	switch d.kind {
	case kindRaft:
		if d.raft.GetFrom() != id {
			return 0, errDropFrom
		}
		switch d.raft.GetType() {
		case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap, pb.MsgVote, pb.MsgPreVote:
		default:
			return 0, fmt.Errorf("%w: %s", errDropStranger, d.raft.GetType())
		}
	case kindPeerAddr:
		if d.addr.ID != id {
			return 0, errDropFrom
		}
	case kindChunk:
		if !known {
			return 0, fmt.Errorf("%w: a snapshot chunk before any append", errDropStranger)
		}
	default:
		return 0, fmt.Errorf("%w: envelope kind %d", errDropStranger, d.kind)
	}
	if removed, err := c.sm.WasRemoved(id); err != nil || removed {
		if err != nil {
			return 0, err
		}
		return 0, errDropRemovedSender
	}
	if c.lead != id && c.inContact() {
		return 0, errDropInContact
	}
	if err := c.noteStranger(from, id, d.addr); err != nil {
		return 0, err
	}
	return id, nil
}

// noteStranger adds or refreshes stranger from in the table, with its
// address if it sent one.
func (c *core) noteStranger(from string, id uint64, addr *peerAddr) error {
	s := &c.strangers
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[from]
	if !ok {
		if len(s.m) >= maxStrangers {
			c.expireLocked()
		}
		if len(s.m) >= maxStrangers {
			return errDropStrangers
		}
		st = &stranger{name: from, id: id}
		s.m[from] = st
		c.log.Info("answering a sender that is not a member yet (this member may have missed its addition)",
			"sender", from, "id", fmt.Sprintf("%016x", id))
	}
	st.seen = c.tick
	if addr != nil && addr.Addr != st.addr {
		st.addr = addr.Addr
		c.out.Peers = append(c.out.Peers, peerChange{name: from, addr: addr.Addr})
	}
	return nil
}

// expireStrangers forgets the strangers silent for strangerTTLElections
// election timeouts, and the transport peers made for them.
func (c *core) expireStrangers() {
	c.strangers.mu.Lock()
	defer c.strangers.mu.Unlock()
	c.expireLocked()
}

func (c *core) expireLocked() {
	ttl := strangerTTLElections * uint64(c.cfg.ElectionTicks)
	for name, st := range c.strangers.m {
		if c.tick-st.seen <= ttl {
			continue
		}
		delete(c.strangers.m, name)
		if st.addr != "" {
			c.out.Peers = append(c.out.Peers, peerChange{name: name, remove: true})
		}
	}
}

// tellAddress sends member to (Raft ID id) this member's address ahead of
// m, when m is a leader's or a candidate's message and to has been silent
// for a contact window: to may have missed this member's addition, and
// needs the address to answer (see above).
func (c *core) tellAddress(envs []transport.Envelope, m *pb.Message, to string) []transport.Envelope {
	switch m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgSnap, pb.MsgVote, pb.MsgPreVote:
	default:
		return envs
	}
	id := m.GetTo()
	if at, ok := c.stand.heard[id]; ok && c.tick-at <= c.contactWindow() {
		return envs
	}
	if at, ok := c.strangers.told[id]; ok && c.tick-at < uint64(max(c.cfg.HeartbeatTicks, 1)) {
		return envs
	}
	addr := c.book.addr(c.id)
	if addr == "" {
		return envs // a transport that routes by name
	}
	c.strangers.told[id] = c.tick
	if len(c.strangers.told) > 4*maxStrangers {
		for peer, at := range c.strangers.told {
			if c.tick-at > uint64(c.cfg.ElectionTicks) {
				delete(c.strangers.told, peer)
			}
		}
	}
	return append(envs, transport.Envelope{From: c.name, To: to, Data: c.hdr().encodePeerAddr(peerAddr{ID: c.id, Addr: addr})})
}

// changePeers carries out a Ready's provisional peer changes on the
// transport. A name the address book holds keeps the book's address: the
// applied membership is the truth.
func (n *Node) changePeers(pcs []peerChange) {
	if len(pcs) == 0 {
		return
	}
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	for _, pc := range pcs {
		if _, member := n.c.book.id(pc.name); member {
			continue
		}
		if pc.remove {
			// A removed member's peer is kept for its notice (standing.go).
			if r, ok := n.tr.(transport.PeerRemover); ok && n.c.removedID(pc.name) == 0 {
				r.RemovePeer(pc.name)
			}
			continue
		}
		if a, ok := n.tr.(transport.PeerAdder); ok {
			n.log.Info("answering a member not known yet at the address it gave", "member", pc.name, "addr", pc.addr)
			a.AddPeer(pc.name, pc.addr)
		}
	}
}

// gateStrangers lets a transport that refuses unknown senders (TCP)
// deliver those that may be members this one has not heard of yet; the
// core decides about each envelope (admitStranger).
func (n *Node) gateStrangers() {
	if g, ok := n.tr.(transport.StrangerGate); ok {
		g.AdmitStrangers(n.mayBeStranger)
	}
}

// mayBeStranger reports whether name may be a member this one missed
// the addition of: not itself, and not one it saw removed (those the
// transport still knows are told so, standing.go; the others stay
// refused, as before). It runs on the transport's goroutines.
func (n *Node) mayBeStranger(name string) bool {
	if name == n.cfg.Name {
		return false
	}
	removed, err := n.sm.WasRemoved(n.c.idOf(name))
	return err == nil && !removed
}
