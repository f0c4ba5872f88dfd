package raftnode

import (
	"errors"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/transport"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// maxStepBatch bounds how many messages, proposals and reads are taken
// in before the next Ready is handled.
const maxStepBatch = 256

// loopState is the raft loop's own bookkeeping; only that goroutine
// touches it.
type loopState struct {
	tick uint64
	// pending proposals wait here for a leader; handed ones have been
	// given to Raft and wait to apply.
	pending []*proposal
	handed  []*proposal
	// resendAll asks for every handed command to be handed again once a
	// leader is known: the term changed (resend.go).
	resendAll bool
	reads     readState
	lead      uint64
	term      uint64
	// leaderlessSince is the tick at which the member last lost sight of
	// a leader; meaningful only while lead == 0.
	leaderlessSince uint64
	// inlineCooldown counts down the batches that go to the apply loop
	// after a slow inline apply.
	inlineCooldown int
	// loss is a leader whose connection its side closed (failover.go).
	loss leaderLoss
}

func (n *Node) raftLoop() {
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	recv := n.tr.Receive()
	var ls loopState
	defer func() {
		stopped := n.errStopped()
		ls.reads.failAll(stopped)
		for _, p := range ls.pending {
			n.waiters.deliver(p.id, proposalResult{err: stopped})
		}
	}()
	if !n.gate.enter(n.stopc) {
		return
	}
	for {
		// Idle while waiting, so that Pause need not wait for an event;
		// each event waits for Resume before it is handled (pause.go).
		n.gate.exit()
		select {
		case <-ticker.C:
			if !n.gate.enter(n.stopc) {
				return
			}
			ls.tick++
			n.loopTick = ls.tick
			n.rn.Tick()
			n.onTick(&ls)
		case env, ok := <-recv:
			if !n.gate.enter(n.stopc) {
				return
			}
			if !ok {
				n.fail(fmt.Errorf("%w: transport closed", errs.Closed))
				return
			}
			n.handleEnvelope(env)
		case p := <-n.propc:
			if !n.gate.enter(n.stopc) {
				return
			}
			ls.pending = append(ls.pending, p)
		case r := <-n.readc:
			if !n.gate.enter(n.stopc) {
				return
			}
			ls.reads.queued = append(ls.reads.queued, r)
		case f := <-n.runc:
			if !n.gate.enter(n.stopc) {
				return
			}
			f()
		case peer := <-n.peerDownc:
			if !n.gate.enter(n.stopc) {
				return
			}
			n.peerDown(&ls, peer)
		case <-n.stopc:
			return
		}
		if !n.gather(&ls, recv) {
			return
		}
		if ls.lead != 0 {
			n.retryRefused(&ls)
			n.flushProposals(&ls)
			n.issueReads(&ls.reads, ls.tick)
		}
		for n.rn.HasReady() {
			if !n.handleReady(&ls) {
				return
			}
			// A new leader learnt from this Ready gets the commands the
			// old one may have lost at once, not at the next tick.
			if ls.resendAll && ls.lead != 0 {
				ls.resendAll = false
				n.resendDue(&ls, true)
			}
		}
	}
}

// gather takes, without waiting, everything else that has already
// arrived (messages, proposals, reads) before the next Ready is handled:
// forwarded proposals, appends and acknowledgements from many peers and
// callers then share one append and one fsync instead of one each. It
// returns false when the node must stop.
func (n *Node) gather(ls *loopState, recv <-chan transport.Envelope) bool {
	for range maxStepBatch {
		select {
		case env, ok := <-recv:
			if !ok {
				n.fail(fmt.Errorf("%w: transport closed", errs.Closed))
				return false
			}
			n.handleEnvelope(env)
		case p := <-n.propc:
			ls.pending = append(ls.pending, p)
		case r := <-n.readc:
			ls.reads.queued = append(ls.reads.queued, r)
		default:
			return true
		}
	}
	return true
}

// flushProposals hands every pending proposal to Raft in one MsgProp, so
// that a burst of callers costs one append (and one fsync) on the leader.
func (n *Node) flushProposals(ls *loopState) {
	// Callers that gave up while their proposal waited here were told it
	// did not happen (ErrNoQuorum): theirs are dropped, not proposed.
	ls.pending = n.waiters.markHanded(ls.pending)
	if len(ls.pending) == 0 {
		return
	}
	// One slab for the flush, not one entry per proposal. It is never
	// reused: the leader clones what it appends (raft.appendEntry), but a
	// follower forwards this very message, entries and all, to its leader
	// in a later Ready, so raft may hold these entries past the Step.
	slab := make([]pb.Entry, len(ls.pending))
	ents := make([]*pb.Entry, len(ls.pending))
	for i, p := range ls.pending {
		slab[i].Data = p.data
		ents[i] = &slab[i]
	}
	err := n.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(n.id), Entries: ents})
	if errors.Is(err, raft.ErrProposalDropped) {
		// Raft refused them (leadership transfer, no leader yet, too much
		// uncommitted): they certainly did not happen; try again next tick.
		for _, p := range ls.pending {
			p.handed.Store(false)
		}
		return
	}
	if err != nil {
		for _, p := range ls.pending {
			n.waiters.deliver(p.id, proposalResult{err: fmt.Errorf("%w: propose: %v", errs.Internal, err)})
		}
	}
	n.markSent(ls, ls.pending)
	ls.handed = append(ls.handed, ls.pending...)
	clear(ls.pending)
	ls.pending = ls.pending[:0]
}

func (n *Node) onTick(ls *loopState) {
	et := uint64(n.cfg.ElectionTicks)
	n.checkLeaderLoss(ls)
	n.noteContact(ls)
	if ls.lead == 0 && ls.tick-ls.leaderlessSince > 3*et {
		// No leader for several election timeouts: we are on a minority
		// side (or the cell has lost quorum). Say so instead of hanging.
		for _, p := range ls.pending {
			n.waiters.deliver(p.id, proposalResult{err: errs.NoQuorum})
		}
		clear(ls.pending)
		ls.pending = ls.pending[:0]
		ls.reads.failAll(errs.NoQuorum)
	}
	if ls.lead != 0 {
		n.retryRefused(ls)
		n.flushProposals(ls)
		n.resendDue(ls, ls.resendAll)
		ls.resendAll = false
		n.retryReads(&ls.reads, ls.tick, et)
		n.issueReads(&ls.reads, ls.tick)
	}
	// Forget handed proposals that have applied (their waiter is gone).
	if ls.tick%8 == 0 {
		ls.handed = n.waiters.stillWaiting(ls.handed)
	}
}

// noteLeader tracks leadership changes for the proposal bookkeeping.
func (n *Node) noteLeader(ls *loopState, lead, term uint64) {
	if lead == ls.lead && term == ls.term {
		return
	}
	if lead == 0 && ls.lead != 0 {
		ls.leaderlessSince = ls.tick
	}
	if term != ls.term && len(ls.handed) > 0 {
		// Commands handed to the old leader may be lost with it, or may
		// still commit under the new one: hand them all again to the new
		// one, which applies each once (resend.go).
		ls.resendAll = true
	}
	if lead != 0 {
		n.counters.leaderChanges.Add(1)
	}
	ls.lead, ls.term = lead, term
	if n.cfg.OnLeader != nil {
		n.cfg.OnLeader(lead, term)
	}
}

// handleReady processes one Ready in the order Raft requires: a leader's
// messages first, then the log written and synced (persist.go), then a
// follower's messages (its acknowledgements promise durability), then the
// committed entries handed to the state machine. It returns false when
// the node must stop.
func (n *Node) handleReady(ls *loopState) bool {
	rd := n.rn.Ready()
	bs := n.rn.BasicStatus()
	n.noteLeader(ls, bs.Lead, bs.HardState.GetTerm())
	for _, r := range rd.ReadStates {
		n.completeRead(&ls.reads, r.RequestCtx, r.Index)
	}
	// A leader may send before its own fsync (Raft thesis 10.2.1): the
	// followers' appends and its own run in parallel. Followers must not:
	// their acknowledgements promise durability.
	leader := bs.RaftState == raft.StateLeader
	if leader {
		n.send(rd.Messages)
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if !n.installSnapshot(rd.Snapshot) {
			return false
		}
		n.persist.last.Store(rd.Snapshot.GetMetadata().GetIndex())
	}
	if len(rd.Entries) > 0 || !raft.IsEmptyHardState(rd.HardState) {
		// Group commit: every entry of this Ready, one batch, one fsync.
		start := time.Now()
		if err := n.store.Append(rd.HardState, rd.Entries, rd.MustSync); err != nil {
			n.fail(fmt.Errorf("%w: persist raft log: %w", errs.Internal, err))
			return false
		}
		if rd.MustSync {
			n.counters.logSync.observe(time.Since(start))
			n.syncs.Add(1)
			n.synced.Add(uint64(len(rd.Entries)))
		}
		if k := len(rd.Entries); k > 0 {
			n.persist.last.Store(rd.Entries[k-1].GetIndex())
		}
	}
	if !leader {
		n.send(rd.Messages)
	}
	if len(rd.CommittedEntries) > 0 {
		job := applyJob{ents: rd.CommittedEntries, cs: n.applyConfChanges(rd.CommittedEntries)}
		handled, ok := n.applyInline(ls, job)
		if !ok || (!handled && !n.handOver(job)) {
			return false
		}
	}
	n.rn.Advance(rd)
	if rd.SoftState != nil || rd.HardState != nil || len(rd.Entries) > 0 {
		n.publishStatus()
	}
	return true
}

// applyConfChanges applies the membership changes among ents to Raft and
// returns the resulting conf state (nil if none changed it). Raft's own
// view must change on its goroutine; the state machine persists the
// result with the applied index.
func (n *Node) applyConfChanges(ents []*pb.Entry) *pb.ConfState {
	var cs *pb.ConfState
	for _, e := range ents {
		var cc pb.ConfChangeI
		switch e.GetType() {
		case pb.EntryConfChange:
			var c pb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &c); err != nil {
				n.log.Error("undecodable conf change; skipped", "index", e.GetIndex(), "err", err)
				continue
			}
			cc = &c
		case pb.EntryConfChangeV2:
			var c pb.ConfChangeV2
			if err := proto.Unmarshal(e.GetData(), &c); err != nil {
				n.log.Error("undecodable conf change; skipped", "index", e.GetIndex(), "err", err)
				continue
			}
			cc = &c
		default:
			continue
		}
		cs = n.rn.ApplyConfChange(cc)
	}
	return cs
}

// installSnapshot replaces the state machine with a snapshot from the
// leader, once every earlier committed entry has been applied.
func (n *Node) installSnapshot(snap *pb.Snapshot) bool {
	barrier := make(chan struct{})
	if !n.handOver(applyJob{barrier: barrier}) {
		return false
	}
	passed := false
	if !n.idleWhile(func() {
		select {
		case <-barrier:
			passed = true
		case <-n.stopc:
		}
	}) || !passed {
		return false
	}
	if err := n.store.InstallSnapshot(snap); err != nil {
		n.fail(fmt.Errorf("%w: install snapshot: %w", errs.Internal, err))
		return false
	}
	n.counters.snapshotsInstalled.Add(1)
	n.log.Info("installed snapshot", "index", snap.GetMetadata().GetIndex())
	n.endCoveredBySnapshot()
	return n.handOver(applyJob{snap: snap})
}

// send encodes and hands messages to the transport. A snapshot message
// goes to a streaming goroutine instead: its state follows in chunks.
func (n *Node) send(msgs []*pb.Message) {
	if len(msgs) == 0 {
		return
	}
	envs := make([]transport.Envelope, 0, len(msgs))
	for _, m := range msgs {
		to, ok := n.MemberName(m.GetTo())
		if !ok {
			continue
		}
		if m.GetType() == pb.MsgSnap {
			n.startSnapshotSender(m, to)
			continue
		}
		data, err := n.hdr().encodeRaft(m)
		if err != nil {
			n.log.Error("encode raft message", "err", err)
			continue
		}
		envs = append(envs, transport.Envelope{From: n.cfg.Name, To: to, Data: data})
	}
	if len(envs) > 0 {
		if err := n.tr.Send(envs); err != nil {
			n.log.Debug("transport send", "err", err)
		}
	}
}

func (n *Node) handleEnvelope(env transport.Envelope) {
	d, err := decodeEnvelope(env.Data)
	if err != nil {
		n.dropped(env.From, "envelope", err)
		return
	}
	if !n.admit(env.From, d) {
		return
	}
	switch {
	case d.raft != nil:
		n.stepFromWire(env.From, d.raft)
	case d.chunk != nil:
		if err := n.checkChunk(env.From, d.chunk); err != nil {
			n.dropped(env.From, "snapshot chunk", err)
			return
		}
		handTo(n, n.chunkc, d.chunk) // the receiver may be busy, or paused
	case d.ack != nil:
		if err := n.checkAck(env.From, d.ack); err != nil {
			n.dropped(env.From, "snapshot chunk ack", err)
			return
		}
		n.senders.deliverAck(d.ack)
	case d.app != nil:
		if n.cfg.OnMessage != nil {
			n.cfg.OnMessage(env.From, d.app)
		}
	}
}
