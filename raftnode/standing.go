package raftnode

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
// voters told it, or notices kept coming for an election timeout. So an
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
// instant that held; the embedding layer stops serving clients when it is
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
	base time.Time    // LastContact is base plus at
	at   atomic.Int64 // nanoseconds after base of the last contact; 0: none yet

	// Raft loop only.
	heard       map[uint64]uint64 // member ID -> loop tick last heard
	contactTick uint64
	probedTick  uint64

	mu      sync.Mutex
	removed []removedPeer        // oldest first
	told    map[string]time.Time // stranger's name -> when last told
	// Notices received: since when, the latest, and from whom.
	noticeFirst, noticeLast time.Time
	noticeBy                map[uint64]bool
	once                    sync.Once // the INFO line of the removal
}

type removedPeer struct {
	name string
	id   uint64
}

func (n *Node) initStanding() {
	s := &n.stand
	s.base = time.Now()
	s.heard = make(map[uint64]uint64)
	s.told = make(map[string]time.Time)
	s.noticeBy = make(map[uint64]bool)
}

// LastContact returns the last instant this member was in contact with
// the cell: it heard its leader or, leading, a quorum of voters. It is
// the zero time until the first contact since Start (a cell electing its
// first leader, a member that has not been added yet).
func (n *Node) LastContact() time.Time {
	at := n.stand.at.Load()
	if at == 0 {
		return time.Time{}
	}
	return n.stand.base.Add(time.Duration(at))
}

// contactWindow is how recently a member must have heard its leader (or
// a leader its quorum) to count as in contact: two heartbeats or a
// quarter election timeout.
func (n *Node) contactWindow() uint64 {
	return uint64(max(2*n.cfg.HeartbeatTicks, n.cfg.ElectionTicks/4, 1))
}

// heardFrom records a Raft message from member id (raft loop).
func (n *Node) heardFrom(id uint64) { n.stand.heard[id] = n.loopTick }

// noteContact runs at each tick of the raft loop: it moves LastContact
// on while in contact, and probes the voters when long out of it.
func (n *Node) noteContact(ls *loopState) {
	s := &n.stand
	window := n.contactWindow()
	in := false
	switch {
	case ls.lead == 0:
	case ls.lead == n.id:
		in = n.quorumHeard(ls.tick, window)
	default:
		t, ok := s.heard[ls.lead]
		in = ok && ls.tick-t <= window
	}
	if in {
		s.contactTick = ls.tick
		s.at.Store(max(int64(time.Since(s.base)), 1))
		return
	}
	et := uint64(n.cfg.ElectionTicks)
	if ls.tick-s.contactTick >= 2*et && ls.tick-s.probedTick >= et {
		s.probedTick = ls.tick
		n.probeOthers()
	}
	if len(s.heard) > 64 {
		for id, t := range s.heard {
			if ls.tick-t > 10*et {
				delete(s.heard, id)
			}
		}
	}
}

// quorumHeard reports whether this member, leading, heard a quorum of
// voters (itself included) within the last window ticks.
func (n *Node) quorumHeard(tick, window uint64) bool {
	voters := n.sm.ConfState().GetVoters()
	count := 0
	for _, v := range voters {
		if t, ok := n.stand.heard[v]; v == n.id || (ok && tick-t <= window) {
			count++
		}
	}
	return 2*count > len(voters)
}

// probeOthers asks every other voter to look at this member: one that
// knows it changes nothing, one that removed it answers with a notice.
func (n *Node) probeOthers() {
	var envs []transport.Envelope
	for _, v := range n.sm.ConfState().GetVoters() {
		if name, ok := n.MemberName(v); ok && v != n.id {
			envs = append(envs, transport.Envelope{From: n.cfg.Name, To: name, Data: n.hdr().encodeProbe()})
		}
	}
	if len(envs) > 0 {
		_ = n.tr.Send(envs)
	}
}

// strangerSpoke handles an envelope from a name that is not a member:
// if its Raft message (or, for a probe, its name) is that of a member
// this member saw removed, it is told, at most once an election timeout.
func (n *Node) strangerSpoke(from string, d decoded) {
	var id uint64
	switch d.kind {
	case kindRaft:
		id = d.raft.GetFrom()
	case kindProbe:
		// By name: a probe carries none of Raft's IDs. A peer kept since
		// the removal knows it; else the ID the name gives (a cell of
		// static peers, whose names are never reused).
		if id = n.removedID(from); id == 0 {
			id = IDFromName(from)
		}
	}
	if id == 0 || id == n.id || d.cell == 0 || d.cell != n.ident.cell.Load() {
		return
	}
	if !n.noticeDue(from, time.Now()) {
		return
	}
	if removed, err := n.sm.WasRemoved(id); err != nil || !removed {
		return
	}
	n.ident.mu.Lock()
	inc := n.ident.peers[id]
	n.ident.mu.Unlock()
	env := transport.Envelope{From: n.cfg.Name, To: from, Data: n.hdr().encodeRemoved(removedNotice{Target: id, Incarnation: inc})}
	_ = n.tr.Send([]transport.Envelope{env})
	n.log.Debug("told a removed member it was removed", "to", from, "id", fmt.Sprintf("%016x", id))
}

// noticeDue reports whether stranger from may be answered now, and
// records it; the table is bounded, and refuses when full of recent ones.
func (n *Node) noticeDue(from string, now time.Time) bool {
	s := &n.stand
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.told[from]; ok && now.Sub(at) < n.electTTL {
		return false
	}
	if len(s.told) >= maxTold {
		for name, at := range s.told {
			if now.Sub(at) >= n.electTTL {
				delete(s.told, name)
			}
		}
		if len(s.told) >= maxTold {
			return false
		}
	}
	s.told[from] = now
	return true
}

// removedID returns the Raft ID of a removed member this member still
// keeps the peer of, by name; 0 if none.
func (n *Node) removedID(name string) uint64 {
	s := &n.stand
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
func (n *Node) rememberRemoved(gone []removedPeer, present func(name string) bool) []string {
	s := &n.stand
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
func (n *Node) toldRemoved(from string, id uint64, r *removedNotice) {
	if r.Target != n.id || (r.Incarnation != 0 && r.Incarnation != n.ident.self) {
		n.dropped(from, "removal notice", errDropNotice)
		return
	}
	now := time.Now()
	s := &n.stand
	cs := n.sm.ConfState()
	s.mu.Lock()
	if s.noticeFirst.IsZero() || now.Sub(s.noticeLast) > 3*n.electTTL {
		s.noticeFirst = now
		clear(s.noticeBy)
	}
	s.noticeLast = now
	s.noticeBy[id] = true
	span := now.Sub(s.noticeFirst)
	count, others := 0, 0
	for _, v := range cs.GetVoters() {
		if v == n.id {
			continue
		}
		others++
		if s.noticeBy[v] {
			count++
		}
	}
	s.mu.Unlock()
	if (others > 0 && 2*count > others) || span >= n.electTTL {
		n.stopRemoved(fmt.Sprintf("told by %d of the other %d voters, %s last", count, others, from))
	}
}

// removedHere stops the member if the address book holds its own
// tombstone (its removal applied, from the log or a snapshot), and
// reports whether it did.
func (n *Node) removedHere() bool {
	removed, err := n.sm.WasRemoved(n.id)
	if err != nil || !removed {
		return false
	}
	n.stopRemoved("its removal applied here")
	return true
}

// stopRemoved stops the member with errs.Removed: not a failure of its
// own, so one INFO line says so, not an error.
func (n *Node) stopRemoved(how string) {
	err := fmt.Errorf("%w: member %q (%s); its name cannot be used again", errs.Removed, n.cfg.Name, how)
	if n.failed.CompareAndSwap(nil, &err) {
		n.stand.once.Do(func() { n.log.Info("removed from the cell; stopping", "how", how) })
	}
	n.stop()
}
