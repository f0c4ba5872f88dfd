package raftnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Membership changes. Raft may drop a proposed conf change silently: it
// turns one into an empty entry when another is pending (etcd-io/raft#354)
// and ProposeConfChange does not report drops (etcd-io/raft#43). So each
// change carries a request ID in its context, and the proposer waits for
// the change with that ID to apply, proposing again when it does not.

// confWaiters maps request IDs to proposers waiting for their change.
type confWaiters struct {
	mu sync.Mutex
	m  map[uint64]chan struct{}
}

func (c *confWaiters) init() { c.m = make(map[uint64]chan struct{}) }

func (c *confWaiters) add(req uint64) chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	c.m[req] = ch
	c.mu.Unlock()
	return ch
}

func (c *confWaiters) remove(req uint64) {
	c.mu.Lock()
	delete(c.m, req)
	c.mu.Unlock()
}

// applied wakes the proposer of each conf change among ents.
func (c *confWaiters) applied(ents []*pb.Entry) {
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
		c.mu.Lock()
		if ch, ok := c.m[m.Req]; ok {
			close(ch)
			delete(c.m, m.Req)
		}
		c.mu.Unlock()
	}
}

// ChangeMembership proposes one membership change (a single change: Raft
// applies it without a joint phase, one at a time) and waits until it has
// applied on this member. m names the member (and its address, for an
// addition); its Req is set here.
func (n *Node) ChangeMembership(ctx context.Context, typ pb.ConfChangeType, id uint64, m command.Member) error {
	m.Req = n.waiters.newID()
	data, err := command.EncodeMember(&m)
	if err != nil {
		return fmt.Errorf("%w: %v", errs.Internal, err)
	}
	cc := &pb.ConfChangeV2{
		Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(id)}},
		Context: data,
	}
	done := n.confs.add(m.Req)
	defer n.confs.remove(m.Req)
	retry := time.NewTicker(2 * n.electTTL)
	defer retry.Stop()
	for {
		n.runOnLoop(func() {
			if err := n.rn.ProposeConfChange(cc); err != nil {
				n.log.Debug("conf change not proposed", "err", err)
			}
		})
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errs.Ambiguous, ctx.Err())
		case <-n.stopc:
			select {
			case <-done:
				return nil // it applied, and stopped the member: its own removal
			default:
			}
			return n.errStopped()
		case <-retry.C:
			// Dropped, or still on its way: propose again. A duplicate
			// that applies twice changes nothing the second time.
		}
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
		st := n.rn.Status()
		if st.RaftState != raft.StateLeader {
			resc <- result{}
			return
		}
		out := make(map[uint64]Progress, len(st.Progress))
		for id, pr := range st.Progress {
			out[id] = Progress{Match: pr.Match, RecentActive: pr.RecentActive || id == n.id, Learner: pr.IsLearner}
		}
		last, _ := n.store.RaftLog().LastIndex()
		resc <- result{out, last, true}
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
