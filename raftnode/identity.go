package raftnode

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

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

// rejectWindowElections is how long, in election timeouts, a reject
// counts toward the majority.
const rejectWindowElections = 10

// identity is the member's own identity and what it knows of its peers'.
type identity struct {
	cell atomic.Uint64 // 0 until known (a joining member learns it)
	self uint64        // this data directory's incarnation

	mu    sync.Mutex
	peers map[uint64]uint64 // Raft ID -> first incarnation heard
	// The core's driver's, in ticks: when each peer last refused us,
	// when we last refused each, and when we last asked every voter to
	// check our incarnation (probed: ever).
	rejectedBy map[uint64]uint64
	toldAt     map[uint64]uint64
	probed     bool
	probedAt   uint64
	log        rateLimit
}

func (c *core) initIdentity(id storage.Identity, peers map[uint64]uint64) {
	if peers == nil {
		peers = map[uint64]uint64{}
	}
	c.ident.cell.Store(id.CellID)
	c.ident.self = id.Incarnation
	c.ident.peers = peers
	c.ident.rejectedBy = map[uint64]uint64{}
	c.ident.toldAt = map[uint64]uint64{}
}

// hdr is the header of everything this member sends.
func (c *core) hdr() header {
	return header{cell: c.ident.cell.Load(), incarnation: c.ident.self}
}

// CellID returns the cell's ID, 0 while a joining member has not heard
// from the cell yet.
func (n *Node) CellID() uint64 { return n.c.ident.cell.Load() }

// admit checks the header of an envelope from member from (a name the
// transport authenticated) and reports whether its message may be
// looked at.
func (c *core) admit(from string, d decoded) bool {
	id, ok := c.memberID(from)
	if !ok {
		var err error
		if id, err = c.admitStranger(from, d); err != nil {
			c.strangerSpoke(from, d)
			c.dropped(from, "envelope", err)
			return false
		}
	}
	if !c.admitCell(from, d.cell) {
		return false
	}
	if d.kind == kindReject {
		c.rejected(from, id)
		return false
	}
	if !c.admitIncarnation(from, id, d.incarnation) {
		return false
	}
	switch d.kind {
	case kindRemoved:
		c.toldRemoved(from, id, d.removed)
		return false
	case kindRaft:
		c.heardFrom(id)
	case kindPeerAddr:
		return false // admitStranger kept it; from a member, the book's stands
	}
	return true
}

func (c *core) admitCell(from string, cell uint64) bool {
	mine := c.ident.cell.Load()
	if cell != 0 && cell == mine {
		return true
	}
	if mine == 0 && cell != 0 {
		// A joining member learns its cell from the first member that
		// speaks to it: one of the members it was configured to reach,
		// over a transport that authenticated it.
		if _, err := c.store.SaveIdentity(storage.Identity{CellID: cell, Name: c.name, Incarnation: c.ident.self}); err != nil {
			c.setFatal(fmt.Errorf("%w: save cell ID: %w", errs.Internal, err))
			return false
		}
		c.ident.cell.Store(cell)
		c.log.Info("joined cell", "cell", fmt.Sprintf("%016x", cell), "from", from)
		return true
	}
	c.dropped(from, "envelope", fmt.Errorf("%w: cell %016x, this member's is %016x", errDropCell, cell, mine))
	return false
}

func (c *core) admitIncarnation(from string, id, inc uint64) bool {
	if inc == 0 {
		c.dropped(from, "envelope", errDropIncarnation)
		return false
	}
	c.ident.mu.Lock()
	known, ok := c.ident.peers[id]
	c.ident.mu.Unlock()
	switch {
	case ok && known == inc:
		return true
	case !ok:
		// First contact: remember it before believing anything it says,
		// so a restart of ours cannot forget whom we trusted.
		if err := c.store.SavePeerIncarnation(id, inc); err != nil {
			c.setFatal(fmt.Errorf("%w: save peer incarnation: %w", errs.Internal, err))
			return false
		}
		c.ident.mu.Lock()
		c.ident.peers[id] = inc
		c.ident.mu.Unlock()
		return true
	}
	c.drops.Add(1)
	if ok, quiet := c.ident.log.allow(c.tick, c.cfg.LogEveryTicks); ok {
		c.log.Error("a member speaks with a new data directory: it may have lost its vote and acknowledged entries, "+
			"so it is ignored; remove it (RemoveMember) and add it again under a new name",
			"member", from, "suppressed", quiet)
	}
	c.ident.mu.Lock()
	at, told := c.ident.toldAt[id]
	due := !told || c.tick-at >= uint64(c.cfg.ElectionTicks)
	if due {
		c.ident.toldAt[id] = c.tick
	}
	c.ident.mu.Unlock()
	if due {
		c.send(transport.Envelope{From: c.name, To: from, Data: c.hdr().encodeReject()})
	}
	return false
}

// rejected records that member from knows us by another incarnation, and
// fails this member once a majority of the other voters do.
func (c *core) rejected(from string, id uint64) {
	window := rejectWindowElections * uint64(c.cfg.ElectionTicks)
	c.ident.mu.Lock()
	c.ident.rejectedBy[id] = c.tick
	count := 0
	for peer, at := range c.ident.rejectedBy {
		if c.tick-at > window {
			delete(c.ident.rejectedBy, peer)
			continue
		}
		count++
	}
	c.ident.mu.Unlock()
	others := 0
	for _, v := range c.sm.ConfState().GetVoters() {
		if v != c.id {
			others++
		}
	}
	if others > 0 && 2*count > others {
		c.setFatal(fmt.Errorf("%w: %d of the other %d voters know member %q by another data directory: "+
			"its state was lost or replaced; remove it (RemoveMember) and add it again under a new name",
			errs.StateLost, count, others, c.name))
		return
	}
	if ok, quiet := c.ident.log.allow(c.tick, c.cfg.LogEveryTicks); ok {
		c.log.Error("a member knows this one by another data directory", "member", from, "suppressed", quiet)
	}
	c.probeVoters()
}

// probeVoters asks every other voter, at most once an election timeout,
// to check this member's incarnation. A member wiped before it
// acknowledged anything hears only from the leader (it never campaigns
// while it hears one), so only the leader would ever refuse it; the
// probe lets the other voters refuse it too, and a majority stops it. A
// voter that knows this incarnation ignores the probe.
func (c *core) probeVoters() {
	c.ident.mu.Lock()
	due := !c.ident.probed || c.tick-c.ident.probedAt >= uint64(c.cfg.ElectionTicks)
	if due {
		c.ident.probed, c.ident.probedAt = true, c.tick
	}
	c.ident.mu.Unlock()
	if due {
		c.probeOthers()
	}
}

// Why an envelope's header is refused.
var (
	errDropCell        = errors.New("raftnode: envelope from another cell")
	errDropIncarnation = errors.New("raftnode: envelope without an incarnation")
)
