package raftnode

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/transport"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A follower that fell behind the compacted log catches up from a
// snapshot. Raft's MsgSnap carries only the metadata; the state streams
// ahead of it in chunks, each acknowledged by the receiver, with a small
// window in flight so a large state never becomes one giant message nor
// floods the transport's queue. The MsgSnap goes last, so the follower
// steps it only once the whole state is staged.

const (
	snapshotWindow     = 4               // chunks in flight
	snapshotAckTimeout = 5 * time.Second // a lost chunk fails the transfer; Raft retries
)

// snapshotSenders tracks the streaming goroutines, one per follower.
type snapshotSenders struct {
	mu     sync.Mutex
	active map[uint64]chan *chunkAck // follower ID -> its acks
	wg     sync.WaitGroup
}

func (s *snapshotSenders) init() { s.active = make(map[uint64]chan *chunkAck) }

func (s *snapshotSenders) wait() { s.wg.Wait() }

func (s *snapshotSenders) deliverAck(a *chunkAck) {
	s.mu.Lock()
	ch := s.active[a.From]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- a:
		default: // a stale or duplicate ack; the sender is not waiting for it
		}
	}
}

func (n *Node) startSnapshotSender(m *pb.Message, to string) {
	peer := m.GetTo()
	acks := make(chan *chunkAck, snapshotWindow*2)
	n.senders.mu.Lock()
	if _, busy := n.senders.active[peer]; busy {
		n.senders.mu.Unlock()
		n.c.ReportSnapshot(peer, raft.SnapshotFailure)
		return
	}
	n.senders.active[peer] = acks
	n.senders.mu.Unlock()
	n.senders.wg.Add(1)
	go func() {
		defer n.senders.wg.Done()
		defer func() {
			// Like the node's own goroutines (guard): a panic fails the
			// node, never the host process.
			if r := recover(); r != nil {
				n.fail(fmt.Errorf("%w: snapshot sender panicked: %v", errs.Internal, r))
			}
		}()
		err := n.streamSnapshot(m, to, acks)
		n.senders.mu.Lock()
		delete(n.senders.active, peer)
		n.senders.mu.Unlock()
		status := raft.SnapshotFinish
		if err != nil {
			n.counters.snapshotsSendFailed.Add(1)
			n.log.Warn("snapshot transfer failed", "to", to, "err", err)
			status = raft.SnapshotFailure
		} else {
			n.counters.snapshotsSent.Add(1)
		}
		n.runOnLoop(func() { n.c.ReportSnapshot(peer, status) })
	}()
}

var errSnapshotGone = errors.New("raftnode: snapshot no longer held")

func (n *Node) streamSnapshot(m *pb.Message, to string, acks <-chan *chunkAck) error {
	md := m.GetSnapshot().GetMetadata()
	r, ok := n.sm.OpenSnapshot(md.GetIndex())
	if !ok {
		return errSnapshotGone
	}
	defer r.Close()
	var sent, acked uint64
	timer := time.NewTimer(snapshotAckTimeout)
	defer timer.Stop()
	waitAck := func() error {
		timer.Reset(snapshotAckTimeout)
		select {
		case a := <-acks:
			if a.Index != md.GetIndex() || a.Term != md.GetTerm() {
				return nil // an ack of an earlier transfer
			}
			if !a.OK {
				return errors.New("raftnode: follower refused a snapshot chunk")
			}
			if a.Seq+1 > acked {
				acked = a.Seq + 1
			}
			return nil
		case <-timer.C:
			return errors.New("raftnode: snapshot chunk not acknowledged")
		case <-n.stopc:
			return n.errStopped()
		}
	}
	// Read one chunk ahead so the last one can say it is last.
	cur, err := r.Next()
	if err != nil {
		return err // io.EOF too: a state machine snapshot is never empty
	}
	for {
		next, err := r.Next()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		last := err != nil
		for sent-acked >= snapshotWindow {
			if err := waitAck(); err != nil {
				return err
			}
		}
		if !n.gate.wait(n.stopc) {
			return n.errStopped()
		}
		c := &chunk{From: n.id, Index: md.GetIndex(), Term: md.GetTerm(), Seq: sent, Last: last, Data: cur}
		if err := n.tr.Send([]transport.Envelope{{From: n.cfg.Name, To: to, Data: n.c.hdr().encodeChunk(c)}}); err != nil {
			return err
		}
		sent++
		if last {
			break
		}
		cur = next
	}
	for acked < sent {
		if err := waitAck(); err != nil {
			return err
		}
	}
	env, err := n.c.hdr().encodeRaft(m)
	if err != nil {
		return err
	}
	return n.tr.Send([]transport.Envelope{{From: n.cfg.Name, To: to, Data: env}})
}

// receiveChunks stages incoming snapshot chunks and acknowledges each.
func (n *Node) receiveChunks() {
	if !n.gate.enter(n.stopc) {
		return
	}
	for {
		var c *chunk
		n.gate.exit()
		select {
		case c = <-n.chunkc:
		case <-n.stopc:
			return
		}
		if !n.gate.enter(n.stopc) {
			return
		}
		err := n.sm.StageChunk(c.Index, c.Term, int(c.Seq), c.Data, c.Last)
		if err != nil {
			n.log.Debug("refused snapshot chunk", "seq", c.Seq, "err", err)
		}
		to, ok := n.c.peerName(c.From) // the leader may be a stranger yet (strangers.go)
		if !ok {
			continue
		}
		ack := &chunkAck{From: n.id, Index: c.Index, Term: c.Term, Seq: c.Seq, OK: err == nil}
		_ = n.tr.Send([]transport.Envelope{{From: n.cfg.Name, To: to, Data: n.c.hdr().encodeAck(ack)}})
	}
}
