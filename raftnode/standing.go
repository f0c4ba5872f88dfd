package raftnode

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/transport"
)

// Where a member stands: whether it is still one, and whether it is in
// touch with the cell.
//
// Removal. A member learns that the cell removed it in one of two ways.
// From the log: its own removal applies here (the address book then
// holds its tombstone), or a snapshot brings the tombstone. Or from the
// others: nobody replicates to a removed member, so one that was cut off
// when its removal committed never gets the entry; when it speaks again
// (a pre-vote, a forwarded request, or the probe a member sends while out
// of contact, which a learner that never campaigns relies on), a member
// that applied the removal answers with a removal notice naming the Raft
// ID it removed and the incarnation it knew it by.
//
// A notice counts only from a member of this member's configuration (the
// transport authenticated the name), of this cell, speaking with the
// incarnation it is known by (admit), and naming this member's ID and
// incarnation. A member that follows the protocol sends one only for a
// removal it applied, which is committed and final, and Raft IDs are
// never reused. As with a leader's word that we lost state (lostState),
// one frame is not enough: the member stops once a majority of the other
// voters told it, or notices kept coming for an election timeout (of its
// ticks). So an
// outsider cannot stop a member (under TLS or Secret it cannot pass for a
// member; in plaintext it can say anything, as with every frame), nor can
// a notice meant for another member or an earlier data directory.
//
// The others keep the transport peer (address, connections) of the
// removedKept most recent removals, so a notice can reach it; nothing it
// says gets past admit. A member that restarted knows removed members by
// their tombstones only, and the TCP transport refuses them: a member cut
// off from every member that ran when its removal applied, and back only
// after they all restarted, is not told.
//
// Contact. A member is in contact with the cell while it hears its leader
// (a follower: a message from it within contactWindow ticks) or, leading,
// hears a quorum of voters within that window. LastContact is the last
// instant that held (the driver's clock at the tick the core said so); the embedding layer stops serving clients when it is
// old (a member cut off, or whose Raft side is frozen). A member out of
// contact for two election timeouts probes every other voter once an
// election timeout (kindProbe), which is how a removed learner, which
// never campaigns, hears of its removal.

// removedKept bounds the removed members whose transport peers are kept
// so that a removal notice can reach them.
const removedKept = 16

// maxTold bounds the strangers remembered for rate limiting notices.
const maxTold = 64

// errDropNotice: a removal notice that does not name this member.
var errDropNotice = errors.New("raftnode: removal notice for another member")

type standing struct {
	// The core's driver's: touched only with Tick and Step.
	heard       map[uint64]uint64 // member ID -> tick last heard
	contactTick uint64
	probedTick  uint64
	told        map[string]uint64 // stranger's name -> tick when last told
	// Notices received: whether some were lately, since when, the
	// latest, and from whom.
	noticing                bool
	noticeFirst, noticeLast uint64
	noticeBy                map[uint64]bool

	mu      sync.Mutex    // shared with the apply side (reloadMembers)
	removed []removedPeer // oldest first
}

type removedPeer struct {
	name string
	id   uint64
}

func (c *core) initStanding() {
	s := &c.stand
	s.heard = make(map[uint64]uint64)
	s.told = make(map[string]uint64)
	s.noticeBy = make(map[uint64]bool)
}

// LastContact returns the last instant this member was in contact with
// the cell: it heard its leader or, leading, a quorum of voters. It is
// the zero time until the first contact since Start (a cell electing its
// first leader, a member that has not been added yet).
func (n *Node) LastContact() time.Time {
	at := n.contactAt.Load()
	if at == 0 {
		return time.Time{}
	}
	return n.contactBase.Add(time.Duration(at))
}

// noteContactNow records that the core was in contact at its last tick.
func (n *Node) noteContactNow() {
	n.contactAt.Store(max(int64(time.Since(n.contactBase)), 1))
}

// contactWindow is how recently a member must have heard its leader (or
// a leader its quorum) to count as in contact: two heartbeats or a
// quarter election timeout.
func (c *core) contactWindow() uint64 {
	return uint64(max(2*c.cfg.HeartbeatTicks, c.cfg.ElectionTicks/4, 1))
}

// heardFrom records a Raft message from member id.
func (c *core) heardFrom(id uint64) { c.stand.heard[id] = c.tick }

// noteContact runs at each tick: it says whether the member is in
// contact (Ready.Contact), and probes the voters when long out of it.
func (c *core) noteContact() {
	s := &c.stand
	if c.inContact() {
		s.contactTick = c.tick
		c.out.Contact = true
		return
	}
	et := uint64(c.cfg.ElectionTicks)
	if c.tick-s.contactTick >= 2*et && c.tick-s.probedTick >= et {
		s.probedTick = c.tick
		c.probeOthers()
	}
	if len(s.heard) > 64 {
		for id, t := range s.heard {
			if c.tick-t > 10*et {
				delete(s.heard, id)
			}
		}
	}
}

// inContact reports whether the member is in contact with the cell now:
// it hears its leader or, leading, a quorum of voters.
func (c *core) inContact() bool {
	window := c.contactWindow()
	switch {
	case c.lead == 0:
		return false
	case c.lead == c.id:
		return c.quorumHeard(window)
	default:
		t, ok := c.stand.heard[c.lead]
		return ok && c.tick-t <= window
	}
}

// quorumHeard reports whether this member, leading, heard a quorum of
// voters (itself included) within the last window ticks.
func (c *core) quorumHeard(window uint64) bool {
	voters := c.sm.ConfState().GetVoters()
	count := 0
	for _, v := range voters {
		if t, ok := c.stand.heard[v]; v == c.id || (ok && c.tick-t <= window) {
			count++
		}
	}
	return 2*count > len(voters)
}

// probeOthers asks every other voter to look at this member: one that
// knows it changes nothing, one that removed it answers with a notice.
func (c *core) probeOthers() {
	for _, v := range c.sm.ConfState().GetVoters() {
		if name, ok := c.book.name(v); ok && v != c.id {
			c.send(transport.Envelope{From: c.name, To: name, Data: c.hdr().encodeProbe()})
		}
	}
}

// strangerSpoke handles an envelope from a name that is not a member:
// if its Raft message (or, for a probe, its name) is that of a member
// this member saw removed, it is told, at most once an election timeout.
func (c *core) strangerSpoke(from string, d decoded) {
	var id uint64
	switch d.kind {
	case kindRaft:
		id = d.raft.GetFrom()
	case kindProbe:
		// By name: a probe carries none of Raft's IDs. A peer kept since
		// the removal knows it; else the ID the name gives (a cell of
		// static peers, whose names are never reused).
		if id = c.removedID(from); id == 0 {
			id = IDFromName(from)
		}
	}
	if id == 0 || id == c.id || d.cell == 0 || d.cell != c.ident.cell.Load() {
		return
	}
	if !c.noticeDue(from) {
		return
	}
	if removed, err := c.sm.WasRemoved(id); err != nil || !removed {
		return
	}
	c.ident.mu.Lock()
	inc := c.ident.peers[id]
	c.ident.mu.Unlock()
	c.send(transport.Envelope{From: c.name, To: from, Data: c.hdr().encodeRemoved(removedNotice{Target: id, Incarnation: inc})})
	c.log.Debug("told a removed member it was removed", "to", from, "id", fmt.Sprintf("%016x", id))
}

// noticeDue reports whether stranger from may be answered now, and
// records it; the table is bounded, and refuses when full of recent ones.
func (c *core) noticeDue(from string) bool {
	s := &c.stand
	et := uint64(c.cfg.ElectionTicks)
	if at, ok := s.told[from]; ok && c.tick-at < et {
		return false
	}
	if len(s.told) >= maxTold {
		for name, at := range s.told {
			if c.tick-at >= et {
				delete(s.told, name)
			}
		}
		if len(s.told) >= maxTold {
			return false
		}
	}
	s.told[from] = c.tick
	return true
}

// removedID returns the Raft ID of a removed member this member still
// keeps the peer of, by name; 0 if none.
func (c *core) removedID(name string) uint64 {
	s := &c.stand
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.removed {
		if r.name == name {
			return r.id
		}
	}
	return 0
}

// rememberRemoved keeps the peers of members just removed (so a notice
// can reach them), forgets those the book has again (a name that came
// back), and returns the names of those now past removedKept, whose
// peers the transport may drop.
func (c *core) rememberRemoved(gone []removedPeer, present func(name string) bool) []string {
	s := &c.stand
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = slices.DeleteFunc(s.removed, func(r removedPeer) bool { return present(r.name) })
	for _, g := range gone {
		s.removed = slices.DeleteFunc(s.removed, func(r removedPeer) bool { return r.name == g.name })
		s.removed = append(s.removed, g)
	}
	var drop []string
	for len(s.removed) > removedKept {
		drop = append(drop, s.removed[0].name)
		s.removed = s.removed[1:]
	}
	return drop
}

// toldRemoved handles a removal notice from member from (ID id), already
// admitted: authenticated, of this cell, with its known incarnation.
func (c *core) toldRemoved(from string, id uint64, r *removedNotice) {
	if r.Target != c.id || (r.Incarnation != 0 && r.Incarnation != c.ident.self) {
		c.dropped(from, "removal notice", errDropNotice)
		return
	}
	s := &c.stand
	et := uint64(c.cfg.ElectionTicks)
	if !s.noticing || c.tick-s.noticeLast > 3*et {
		s.noticing, s.noticeFirst = true, c.tick
		clear(s.noticeBy)
	}
	s.noticeLast = c.tick
	s.noticeBy[id] = true
	span := c.tick - s.noticeFirst
	count, others := 0, 0
	for _, v := range c.sm.ConfState().GetVoters() {
		if v == c.id {
			continue
		}
		others++
		if s.noticeBy[v] {
			count++
		}
	}
	if (others > 0 && 2*count > others) || span >= et {
		c.setFatal(removedError(c.name, fmt.Sprintf("told by %d of the other %d voters, %s last", count, others, from)))
	}
}

// removedError is the error a removed member stops with.
func removedError(name, how string) error {
	return fmt.Errorf("%w: member %q (%s); its name cannot be used again", errs.Removed, name, how)
}

// removedHere stops the member if the address book holds its own
// tombstone (its removal applied, from the log or a snapshot), and
// reports whether it did.
func (n *Node) removedHere() bool {
	removed, err := n.sm.WasRemoved(n.id)
	if err != nil || !removed {
		return false
	}
	n.stopRemoved(removedError(n.cfg.Name, "its removal applied here"))
	return true
}

// stopRemoved stops the member with err (errs.Removed): not a failure
// of its own, so one INFO line says so, not an error.
func (n *Node) stopRemoved(err error) {
	if n.failed.CompareAndSwap(nil, &err) {
		n.log.Info("removed from the cell; stopping", "err", err)
	}
	n.stop()
}
