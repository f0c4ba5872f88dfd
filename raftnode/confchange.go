package raftnode

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Membership changes. Raft may drop a proposed conf change silently: it
// turns one into an empty entry when another is pending (etcd-io/raft#354)
// and ProposeConfChange does not report drops (etcd-io/raft#43). So each
// change carries a request ID in its context, and the core proposes it
// again every two election timeouts until the change with that ID
// applies or its caller gives up. A duplicate that applies twice changes
// nothing the second time.

// confWaiter is one caller waiting for its membership change.
type confWaiter struct {
	req  uint64
	cc   *pb.ConfChangeV2
	done chan struct{} // closed when the change applied
	// sentTick is the core's: when the change was last proposed.
	sentTick uint64
}

// confWaiters maps request IDs to the callers waiting for their change.
type confWaiters struct {
	mu sync.Mutex
	m  map[uint64]*confWaiter
}

func (cw *confWaiters) init() { cw.m = make(map[uint64]*confWaiter) }

func (cw *confWaiters) add(w *confWaiter) {
	cw.mu.Lock()
	cw.m[w.req] = w
	cw.mu.Unlock()
}

func (cw *confWaiters) remove(req uint64) {
	cw.mu.Lock()
	delete(cw.m, req)
	cw.mu.Unlock()
}

// ConfApplied appends to buf the answers of the callers whose changes
// are among ents, which just applied. The apply side calls it; it
// touches only the waiter table.
func (c *core) ConfApplied(ents []*pb.Entry, buf []answer) []answer {
	cw := &c.confs
	for _, e := range ents {
		if e.GetType() != pb.EntryConfChangeV2 {
			continue
		}
		var cc pb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			continue
		}
		m, err := command.DecodeMember(cc.GetContext())
		if err != nil {
			continue
		}
		cw.mu.Lock()
		if w, ok := cw.m[m.Req]; ok {
			delete(cw.m, m.Req)
			buf = append(buf, answer{conf: w})
		}
		cw.mu.Unlock()
	}
	return buf
}

// ProposeConfChange proposes w's change, which its caller added to the
// waiter table, and keeps proposing it (retryConfChanges) until it
// applies or the caller gives up.
func (c *core) ProposeConfChange(w *confWaiter) {
	w.sentTick = c.tick
	if err := c.rn.ProposeConfChange(w.cc); err != nil {
		c.log.Debug("conf change not proposed", "err", err)
	}
}

// retryConfChanges proposes again every change not seen to apply within
// two election timeouts: dropped, or still on its way.
func (c *core) retryConfChanges() {
	cw := &c.confs
	after := 2 * uint64(c.cfg.ElectionTicks)
	var due []*confWaiter
	cw.mu.Lock()
	for _, w := range cw.m {
		if c.tick-w.sentTick >= after {
			due = append(due, w)
		}
	}
	cw.mu.Unlock()
	// In request order, so that two cores driven alike propose alike.
	slices.SortFunc(due, func(a, b *confWaiter) int { return cmp.Compare(a.req, b.req) })
	for _, w := range due {
		c.ProposeConfChange(w)
	}
}

// ChangeMembership proposes one membership change (a single change: Raft
// applies it without a joint phase, one at a time) and waits until it has
// applied on this member. m names the member (and its address, for an
// addition); its Req is set here.
func (n *Node) ChangeMembership(ctx context.Context, typ pb.ConfChangeType, id uint64, m command.Member) error {
	m.Req = n.c.waiters.newID()
	data, err := command.EncodeMember(&m)
	if err != nil {
		return fmt.Errorf("%w: %v", errs.Internal, err)
	}
	w := &confWaiter{
		req: m.Req,
		cc: &pb.ConfChangeV2{
			Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(id)}},
			Context: data,
		},
		done: make(chan struct{}),
	}
	n.c.confs.add(w)
	defer n.c.confs.remove(m.Req)
	n.runOnLoop(func() { n.c.ProposeConfChange(w) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errs.Ambiguous, ctx.Err())
	case <-n.stopc:
		select {
		case <-w.done:
			return nil // it applied, and stopped the member: its own removal
		default:
		}
		return n.errStopped()
	}
}

// Progress is the leader's view of one member's replication.
type Progress struct {
	Match        uint64 // the highest index known replicated on it
	RecentActive bool   // it answered within the last election timeout
	Learner      bool
}

// Replication returns, when this member leads, its view of every member's
// replication and its own last index; ok is false on a follower.
func (n *Node) Replication(ctx context.Context) (prs map[uint64]Progress, last uint64, ok bool, err error) {
	type result struct {
		prs  map[uint64]Progress
		last uint64
		ok   bool
	}
	resc := make(chan result, 1)
	n.runOnLoop(func() {
		prs, ok := n.c.replication()
		last, _ := n.store.RaftLog().LastIndex()
		resc <- result{prs, last, ok}
	})
	select {
	case r := <-resc:
		return r.prs, r.last, r.ok, nil
	case <-ctx.Done():
		return nil, 0, false, ctx.Err()
	case <-n.stopc:
		return nil, 0, false, n.errStopped()
	}
}

// replication returns the leader's view of every member's replication;
// ok is false on a follower.
func (c *core) replication() (map[uint64]Progress, bool) {
	st := c.rn.Status()
	if st.RaftState != raft.StateLeader {
		return nil, false
	}
	out := make(map[uint64]Progress, len(st.Progress))
	for id, pr := range st.Progress {
		out[id] = Progress{Match: pr.Match, RecentActive: pr.RecentActive || id == c.id, Learner: pr.IsLearner}
	}
	return out, true
}
