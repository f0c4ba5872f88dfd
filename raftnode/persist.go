package raftnode

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Persisting off the stepping path. Raft runs with AsyncStorageWrites:
// each Ready's log entries and hard state come as a MsgStorageAppend,
// which the raft loop queues for the persist goroutine instead of
// writing them itself. While the disk syncs, the raft loop goes on
// stepping proposals and acknowledgements, so the next append grows
// meanwhile; the persist goroutine then writes everything queued since
// its last sync and syncs once (group commit across Readies). Only after
// that sync does it deliver the messages raft attached to the appends:
// acknowledgements and votes to peers (which promise durability) and
// the stability reports back to the raft loop.
//
// Snapshots from the leader are the exception: the raft loop waits for
// the queue to drain and installs them itself (persistNow), as the
// state machine must jump in step with the log.

// asyncPersist turns persisting off the stepping path on; off (the
// default), the raft loop writes and syncs each Ready's log itself
// (handleReadySync). Async once sent eight times the messages per put,
// wrote the WAL once per queued append and stalled a write for a
// heartbeat round when a follower's ack beat the leader's own write;
// all three are fixed (holdProposals, mergeAppends, and acks admitted up
// to persister.queued), and
// async now wins at 64 callers, but on two busy cores it still loses to
// sync for a single caller and is even at 16 (bench/RESULTS.md), so sync
// stays the default. It is fixed for the life of the program (set once
// at package init, read only after).
var asyncPersist = persistMode == "async"

// persistMode is empty in every normal build. Linking with
//
//	-ldflags=-X=github.com/coordcell/coord/raftnode.persistMode=async
//
// builds a program whose raft loops persist asynchronously, so that a
// benchmark can compare both ways from two binaries of one commit. It is
// a string because -X sets only strings.
var persistMode string

// maxPersistBatch bounds the appends written under one sync.
const maxPersistBatch = 1024

// persister is the raft loop's hand-off to the persist goroutine.
type persister struct {
	// queue carries MsgStorageAppend messages in Ready order, or, with
	// a nil message, a barrier closed once everything before it is done.
	queue chan persistItem
	// done carries the stability reports (and any other self-addressed
	// responses) back to the raft loop, in order.
	done chan persisted
	// last is the highest log index known durable, for compaction,
	// which must never discard an entry the log does not hold yet.
	last atomic.Uint64
	// unsynced counts the appends of entries queued whose reports have
	// not come back on done: while there are any, new proposals wait
	// (holdProposals, holdsProposals). Only the raft loop touches it and
	// queued.
	unsynced int
	// queued is the end of the log as handed to the persist goroutine:
	// the last index of the latest append queued (a shorter one truncates
	// the tail). A leader sends its appends before its own write lands
	// (Raft thesis 10.2.1), so a quick follower may acknowledge up to
	// here while the store's log still ends earlier; the wire checks
	// (validate.go) admit acknowledgements up to it.
	queued uint64
	// ents is the persist goroutine's scratch for a batch's merged
	// entries.
	ents []*pb.Entry
}

// persisted is one batch's self-addressed responses, and how many of
// the appends counted in persister.unsynced the batch covered.
type persisted struct {
	msgs    []*pb.Message
	appends int
}

type persistItem struct {
	m       *pb.Message
	barrier chan struct{}
}

func (p *persister) init(last uint64) {
	p.queue = make(chan persistItem, 4096)
	p.done = make(chan persisted, 64)
	p.last.Store(last)
}

// queueAppend hands m to the persist goroutine. It returns false when the
// node stopped.
func (n *Node) queueAppend(m *pb.Message) bool {
	if ents := m.GetEntries(); len(ents) > 0 {
		n.persist.queued = ents[len(ents)-1].GetIndex()
	}
	if n.holdsProposals(m) {
		n.persist.unsynced++
	}
	// The disk may be far behind, or the member paused.
	return handTo(n, n.persist.queue, persistItem{m: m})
}

// drainPersist waits until every append queued so far is durable and its
// responses delivered. It returns false when the node stopped.
func (n *Node) drainPersist() bool {
	barrier := make(chan struct{})
	if !handTo(n, n.persist.queue, persistItem{barrier: barrier}) {
		return false
	}
	passed := false
	return n.idleWhile(func() {
		select {
		case <-barrier:
			passed = true
		case <-n.stopc:
		}
	}) && passed
}

// persistLoop writes the queued appends, one sync per batch, and
// delivers their responses once the sync is done.
func (n *Node) persistLoop() {
	if !n.gate.enter(n.stopc) {
		return
	}
	batch := make([]persistItem, 0, maxPersistBatch)
	for {
		n.gate.exit()
		var first persistItem
		select {
		case first = <-n.persist.queue:
		case <-n.stopc:
			return
		}
		if !n.gate.enter(n.stopc) {
			return
		}
		batch = append(batch[:0], first)
	more:
		for len(batch) < maxPersistBatch && batch[len(batch)-1].m != nil {
			select {
			case it := <-n.persist.queue:
				batch = append(batch, it)
			default:
				break more
			}
		}
		if !n.persistBatch(batch) {
			return
		}
		clear(batch)
	}
}

// persistBatch writes the appends of batch (ending at most with one
// barrier) as one write, syncs once if any response depends on them,
// and delivers the responses. It returns false when the node must stop.
func (n *Node) persistBatch(batch []persistItem) bool {
	needSync := false
	for _, it := range batch {
		if it.m != nil && len(it.m.GetResponses()) > 0 {
			needSync = true
		}
	}
	hs, ents, wrote, err := mergeAppends(n.persist.ents[:0], batch)
	n.persist.ents = ents
	if err != nil {
		n.fail(fmt.Errorf("%w: persist raft log: %w", errs.Internal, err))
		return false
	}
	if wrote {
		start := time.Now()
		if err := n.store.Append(hs, ents, needSync); err != nil {
			n.fail(fmt.Errorf("%w: persist raft log: %w", errs.Internal, err))
			return false
		}
		if needSync {
			n.counters.logSync.observe(time.Since(start))
			n.syncs.Add(1)
			n.synced.Add(uint64(len(ents)))
		}
		if k := len(ents); k > 0 {
			// A shorter append replaces the tail: the durable end is its
			// last entry, whatever was there before.
			n.persist.last.Store(ents[k-1].GetIndex())
		}
	}
	// The store keeps none of them; the next batch reuses the slice.
	clear(ents)
	var local, remote []*pb.Message
	appends := 0
	for _, it := range batch {
		if it.m == nil {
			close(it.barrier)
			continue
		}
		if n.holdsProposals(it.m) {
			appends++
		}
		for _, r := range it.m.GetResponses() {
			if r.GetTo() == n.id {
				local = append(local, r)
			} else {
				remote = append(remote, r)
			}
		}
	}
	n.send(dropCoveredAcks(remote))
	if len(local) == 0 {
		return true
	}
	return handTo(n, n.persist.done, persisted{msgs: local, appends: appends})
}

// holdsProposals reports whether the append m counts in
// persister.unsynced: it writes entries (a write of the hard state alone,
// such as a new commit index, batches nothing on the network, and
// holding proposals for its sync would cost a single caller one more
// sync per write) and carries a response to this member, so that its
// completion comes back on persister.done.
func (n *Node) holdsProposals(m *pb.Message) bool {
	if len(m.GetEntries()) == 0 {
		return false
	}
	for _, r := range m.GetResponses() {
		if r.GetTo() == n.id {
			return true
		}
	}
	return false
}

// errAppendGap is a queued append that would leave a hole in the log,
// which Raft never asks for.
var errAppendGap = errors.New("append leaves a gap in the log")

// mergeAppends folds the appends of batch into the one write that leaves
// the log as writing them one by one would: entries that continue the
// merged run extend it, entries starting at or before its end replace
// its tail from there (as Store.Append truncates a log), and the last
// hard state given wins. The entries go into buf (which the caller
// reuses; it is returned grown), wrote reports whether there is anything
// to write at all.
func mergeAppends(buf []*pb.Entry, batch []persistItem) (hs *pb.HardState, ents []*pb.Entry, wrote bool, err error) {
	ents = buf
	for _, it := range batch {
		m := it.m
		if m == nil || !writes(m) {
			continue
		}
		wrote = true
		if h := hardStateOf(m); h != nil {
			hs = h
		}
		add := m.GetEntries()
		if len(add) == 0 {
			continue
		}
		if len(ents) > 0 {
			first, runFirst := add[0].GetIndex(), ents[0].GetIndex()
			runNext := runFirst + uint64(len(ents))
			switch {
			case first > runNext:
				return nil, ents, false, fmt.Errorf("%w: entries from %d after a run ending at %d", errAppendGap, first, runNext-1)
			case first <= runFirst:
				clear(ents)
				ents = ents[:0]
			default:
				clear(ents[first-runFirst:])
				ents = ents[:first-runFirst]
			}
		}
		ents = append(ents, add...)
	}
	return hs, ents, wrote, nil
}

// dropCoveredAcks removes, in place, every acknowledgement that a later
// one of msgs makes redundant: a MsgAppResp that accepts up to an index
// promises everything before it, so of a peer's acceptances in one term
// only the highest need go out. Rejections, votes and everything else
// are kept, in order.
func dropCoveredAcks(msgs []*pb.Message) []*pb.Message {
	if len(msgs) < 2 {
		return msgs
	}
	type key struct{ to, term uint64 }
	var seen []key
	var high []uint64
	drop := 0
	// From the end: an acceptance is covered by a later one of at least
	// its index to the same peer in the same term.
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.GetType() != pb.MsgAppResp || m.GetReject() {
			continue
		}
		k, idx := key{m.GetTo(), m.GetTerm()}, m.GetIndex()
		at := slices.Index(seen, k)
		switch {
		case at < 0:
			seen = append(seen, k)
			high = append(high, idx)
		case high[at] >= idx:
			msgs[i] = nil
			drop++
		default:
			high[at] = idx
		}
	}
	if drop == 0 {
		return msgs
	}
	return slices.DeleteFunc(msgs, func(m *pb.Message) bool { return m == nil })
}

// persistNow handles m on the raft loop itself, once everything queued
// before it is durable: used for snapshots. It returns false when the
// node must stop.
func (n *Node) persistNow(m *pb.Message) bool {
	if !n.drainPersist() {
		return false
	}
	if snap := m.GetSnapshot(); !raft.IsEmptySnap(snap) {
		if !n.installSnapshot(snap) {
			return false
		}
		n.persist.last.Store(snap.GetMetadata().GetIndex())
		n.persist.queued = snap.GetMetadata().GetIndex()
	}
	if writes(m) {
		start := time.Now()
		if err := n.store.Append(hardStateOf(m), m.GetEntries(), true); err != nil {
			n.fail(fmt.Errorf("%w: persist raft log: %w", errs.Internal, err))
			return false
		}
		n.counters.logSync.observe(time.Since(start))
		n.syncs.Add(1)
		n.synced.Add(uint64(len(m.GetEntries())))
		if k := len(m.GetEntries()); k > 0 {
			n.persist.last.Store(m.GetEntries()[k-1].GetIndex())
			n.persist.queued = m.GetEntries()[k-1].GetIndex()
		}
	}
	var remote []*pb.Message
	for _, r := range m.GetResponses() {
		if r.GetTo() == n.id {
			if !n.stepLocal(r) {
				return false
			}
		} else {
			remote = append(remote, r)
		}
	}
	n.send(remote)
	return true
}

// stepLocal steps a response the storage side addressed to this member.
func (n *Node) stepLocal(m *pb.Message) bool {
	if err := n.rn.Step(m); err != nil {
		n.fail(fmt.Errorf("%w: step local %v: %w", errs.Internal, m.GetType(), err))
		return false
	}
	return true
}

// writes reports whether an append message has anything to write.
func writes(m *pb.Message) bool {
	return len(m.GetEntries()) > 0 || m.Term != nil
}

// hardStateOf rebuilds the hard state an append message carries (nil
// when unchanged: raft sets the three fields together or not at all).
func hardStateOf(m *pb.Message) *pb.HardState {
	if m.Term == nil {
		return nil
	}
	return &pb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
}
