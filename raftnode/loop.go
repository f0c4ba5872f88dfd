package raftnode

import (
	"errors"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/transport"
	pb "go.etcd.io/raft/v3/raftpb"
)

// maxStepBatch bounds how many messages, proposals and reads are taken
// in before the next Ready is handled.
const maxStepBatch = 256

// raftLoop drives the core: the ticker, the network, the callers'
// proposals and reads, and reports from the node's other goroutines go
// in; each Ready is carried out.
func (n *Node) raftLoop() {
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	recv := n.tr.Receive()
	c := n.c
	defer func() { deliverAll(c.Stopped(n.errStopped())) }()
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
			c.Tick()
		case env, ok := <-recv:
			if !n.gate.enter(n.stopc) {
				return
			}
			if !ok {
				n.fail(fmt.Errorf("%w: transport closed", errs.Closed))
				return
			}
			c.Step(env)
		case p := <-n.propc:
			if !n.gate.enter(n.stopc) {
				return
			}
			c.Propose(p)
		case r := <-n.readc:
			if !n.gate.enter(n.stopc) {
				return
			}
			c.Read(r)
		case f := <-n.runc:
			if !n.gate.enter(n.stopc) {
				return
			}
			f()
		case peer := <-n.peerDownc:
			if !n.gate.enter(n.stopc) {
				return
			}
			c.PeerDown(peer)
		case <-n.stopc:
			return
		}
		if !n.gather(recv) {
			return
		}
		c.Flush()
		for c.HasReady() {
			if !n.handleReady(c.Ready()) {
				return
			}
		}
	}
}

// gather takes, without waiting, everything else that has already
// arrived (messages, proposals, reads) before the next Ready is handled:
// forwarded proposals, appends and acknowledgements from many peers and
// callers then share one append and one fsync instead of one each. It
// returns false when the node must stop.
func (n *Node) gather(recv <-chan transport.Envelope) bool {
	for range maxStepBatch {
		select {
		case env, ok := <-recv:
			if !ok {
				n.fail(fmt.Errorf("%w: transport closed", errs.Closed))
				return false
			}
			n.c.Step(env)
		case p := <-n.propc:
			n.c.Propose(p)
		case r := <-n.readc:
			n.c.Read(r)
		default:
			return true
		}
	}
	return true
}

// handleReady carries out one Ready in the order it gives (core.go): the
// answers and the effects that need no log, then a leader's messages,
// the log written and synced (persist.go), a follower's messages, the
// committed entries handed to the state machine. It returns false when
// the node must stop.
func (n *Node) handleReady(rd Ready) bool {
	deliverAll(rd.Answers)
	if rd.Fatal != nil {
		if errors.Is(rd.Fatal, errs.Removed) {
			n.stopRemoved(rd.Fatal)
		} else {
			n.fail(rd.Fatal)
		}
		return false
	}
	if rd.LeaderChanged && n.cfg.OnLeader != nil {
		n.cfg.OnLeader(rd.Lead, rd.Term)
	}
	if rd.Contact {
		n.noteContactNow()
	}
	for _, ch := range rd.Chunks {
		if !handTo(n, n.chunkc, ch) { // the receiver may be busy, or paused
			return false
		}
	}
	for _, a := range rd.Acks {
		n.senders.deliverAck(a)
	}
	if n.cfg.OnMessage != nil {
		for _, m := range rd.Apps {
			n.cfg.OnMessage(m.from, m.data)
		}
	}
	n.changePeers(rd.Peers)
	n.send(rd.Envelopes)
	if !rd.HasRaft {
		n.c.Advance(rd)
		return true
	}
	// A leader may send before its own fsync (Raft thesis 10.2.1): the
	// followers' appends and its own run in parallel. Followers must not:
	// their acknowledgements promise durability.
	if rd.Leader {
		n.sendRaft(rd)
	}
	if rd.Snapshot != nil {
		if !n.installSnapshot(rd.Snapshot) {
			return false
		}
		n.persist.last.Store(rd.Snapshot.GetMetadata().GetIndex())
	}
	if rd.HardState != nil || len(rd.Entries) > 0 {
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
	if !rd.Leader {
		n.sendRaft(rd)
	}
	if len(rd.CommittedEntries) > 0 {
		job := applyJob{ents: rd.CommittedEntries, cs: rd.ConfState}
		handled, ok := n.applyInline(job)
		if !ok || (!handled && !n.handOver(job)) {
			return false
		}
	}
	n.c.Advance(rd)
	return true
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
	deliverAll(n.c.SnapshotInstalled())
	return n.handOver(applyJob{snap: snap})
}

// sendRaft sends a Ready's Raft messages, and starts streaming its
// snapshots.
func (n *Node) sendRaft(rd Ready) {
	n.send(rd.Messages)
	for _, s := range rd.Snaps {
		n.startSnapshotSender(s.m, s.to)
	}
}

// send hands envelopes to the transport.
func (n *Node) send(envs []transport.Envelope) {
	if len(envs) == 0 {
		return
	}
	if err := n.tr.Send(envs); err != nil {
		n.log.Debug("transport send", "err", err)
	}
}
