package raftnode

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
)

// Identity on the wire (invariants 11 and 12 of ARCHITECTURE.md).
//
// Every envelope carries the sender's cell ID and incarnation (wire.go).
// The cell ID keeps two cells that can reach each other apart: a member
// drops whatever another cell says. The incarnation is drawn at random
// when a data directory is created (storage.Identity); each member
// records, durably, the incarnation it first hears from each peer. A
// peer that later speaks with another incarnation has come back with a
// wiped or replaced data directory: it may have lost its vote and
// entries it acknowledged, so nothing it says is believed (no vote, no
// acknowledgement counts), and it is told so. A member told so by a
// majority of the other voters fails with errs.StateLost, naming what to
// do; one told so by fewer (a process of an old cell, still shutting
// down on a reused address) only logs it.

// rejectWindow is how long a reject counts toward the majority.
const rejectWindowElections = 10

// identity is the member's own identity and what it knows of its peers'.
type identity struct {
	cell atomic.Uint64 // 0 until known (a joining member learns it)
	self uint64        // this data directory's incarnation

	mu         sync.Mutex
	peers      map[uint64]uint64    // Raft ID -> first incarnation heard
	rejectedBy map[uint64]time.Time // Raft ID -> when it last refused us
	toldAt     map[uint64]time.Time // Raft ID -> when we last refused it
	probedAt   time.Time            // when we last asked every voter to check our incarnation
	log        rateLimit
}

func (n *Node) initIdentity() error {
	peers, err := n.store.PeerIncarnations()
	if err != nil {
		return err
	}
	n.ident.cell.Store(n.cfg.Identity.CellID)
	n.ident.self = n.cfg.Identity.Incarnation
	n.ident.peers = peers
	n.ident.rejectedBy = map[uint64]time.Time{}
	n.ident.toldAt = map[uint64]time.Time{}
	return nil
}

// hdr is the header of everything this member sends.
func (n *Node) hdr() header {
	return header{cell: n.ident.cell.Load(), incarnation: n.ident.self}
}

// CellID returns the cell's ID, 0 while a joining member has not heard
// from the cell yet.
func (n *Node) CellID() uint64 { return n.ident.cell.Load() }

// admit checks the header of an envelope from member from (a name the
// transport authenticated) and reports whether its message may be
// looked at. It runs on the raft loop.
func (n *Node) admit(from string, d decoded) bool {
	id, ok := n.senderID(from)
	if !ok {
		n.strangerSpoke(from, d)
		n.dropped(from, "envelope", errDropSender)
		return false
	}
	if !n.admitCell(from, d.cell) {
		return false
	}
	if d.kind == kindReject {
		n.rejected(from, id)
		return false
	}
	if !n.admitIncarnation(from, id, d.incarnation) {
		return false
	}
	switch d.kind {
	case kindRemoved:
		n.toldRemoved(from, id, d.removed)
		return false
	case kindRaft:
		n.heardFrom(id)
	}
	return true
}

func (n *Node) admitCell(from string, cell uint64) bool {
	mine := n.ident.cell.Load()
	if cell != 0 && cell == mine {
		return true
	}
	if mine == 0 && cell != 0 {
		// A joining member learns its cell from the first member that
		// speaks to it: one of the members it was configured to reach,
		// over a transport that authenticated it.
		if _, err := n.store.SaveIdentity(storage.Identity{CellID: cell, Name: n.cfg.Name, Incarnation: n.ident.self}); err != nil {
			n.fail(fmt.Errorf("%w: save cell ID: %w", errs.Internal, err))
			return false
		}
		n.ident.cell.Store(cell)
		n.log.Info("joined cell", "cell", fmt.Sprintf("%016x", cell), "from", from)
		return true
	}
	n.dropped(from, "envelope", fmt.Errorf("%w: cell %016x, this member's is %016x", errDropCell, cell, mine))
	return false
}

func (n *Node) admitIncarnation(from string, id, inc uint64) bool {
	if inc == 0 {
		n.dropped(from, "envelope", errDropIncarnation)
		return false
	}
	n.ident.mu.Lock()
	known, ok := n.ident.peers[id]
	n.ident.mu.Unlock()
	switch {
	case ok && known == inc:
		return true
	case !ok:
		// First contact: remember it before believing anything it says,
		// so a restart of ours cannot forget whom we trusted.
		if err := n.store.SavePeerIncarnation(id, inc); err != nil {
			n.fail(fmt.Errorf("%w: save peer incarnation: %w", errs.Internal, err))
			return false
		}
		n.ident.mu.Lock()
		n.ident.peers[id] = inc
		n.ident.mu.Unlock()
		return true
	}
	n.drops.Add(1)
	now := time.Now()
	if ok, quiet := n.ident.log.allow(now); ok {
		n.log.Error("a member speaks with a new data directory: it may have lost its vote and acknowledged entries, "+
			"so it is ignored; remove it (RemoveMember) and add it again under a new name",
			"member", from, "suppressed", quiet)
	}
	n.ident.mu.Lock()
	due := now.Sub(n.ident.toldAt[id]) >= n.electTTL
	if due {
		n.ident.toldAt[id] = now
	}
	n.ident.mu.Unlock()
	if due {
		env := transport.Envelope{From: n.cfg.Name, To: from, Data: n.hdr().encodeReject()}
		_ = n.tr.Send([]transport.Envelope{env})
	}
	return false
}

// rejected records that member from knows us by another incarnation, and
// fails this member once a majority of the other voters do.
func (n *Node) rejected(from string, id uint64) {
	now := time.Now()
	window := rejectWindowElections * n.electTTL
	n.ident.mu.Lock()
	n.ident.rejectedBy[id] = now
	count := 0
	for peer, at := range n.ident.rejectedBy {
		if now.Sub(at) > window {
			delete(n.ident.rejectedBy, peer)
			continue
		}
		count++
	}
	n.ident.mu.Unlock()
	others := 0
	for _, v := range n.sm.ConfState().GetVoters() {
		if v != n.id {
			others++
		}
	}
	if others > 0 && 2*count > others {
		n.fail(fmt.Errorf("%w: %d of the other %d voters know member %q by another data directory: "+
			"its state was lost or replaced; remove it (RemoveMember) and add it again under a new name",
			errs.StateLost, count, others, n.cfg.Name))
		return
	}
	if ok, quiet := n.ident.log.allow(now); ok {
		n.log.Error("a member knows this one by another data directory", "member", from, "suppressed", quiet)
	}
	n.probeVoters(now)
}

// probeVoters asks every other voter, at most once an election timeout,
// to check this member's incarnation. A member wiped before it
// acknowledged anything hears only from the leader (it never campaigns
// while it hears one), so only the leader would ever refuse it; the
// probe lets the other voters refuse it too, and a majority stops it. A
// voter that knows this incarnation ignores the probe.
func (n *Node) probeVoters(now time.Time) {
	n.ident.mu.Lock()
	due := now.Sub(n.ident.probedAt) >= n.electTTL
	if due {
		n.ident.probedAt = now
	}
	n.ident.mu.Unlock()
	if !due {
		return
	}
	var envs []transport.Envelope
	for _, v := range n.sm.ConfState().GetVoters() {
		if name, ok := n.MemberName(v); ok && v != n.id {
			envs = append(envs, transport.Envelope{From: n.cfg.Name, To: name, Data: n.hdr().encodeProbe()})
		}
	}
	_ = n.tr.Send(envs)
}

// Why an envelope's header is refused.
var (
	errDropCell        = errors.New("raftnode: envelope from another cell")
	errDropIncarnation = errors.New("raftnode: envelope without an incarnation")
)
