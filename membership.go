package coord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/mpcheck"
	"github.com/coordcell/coord/raftnode"
	"github.com/vmihailenco/msgpack/v5"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Member is one member of the cell.
type Member struct {
	Name string
	Addr string
	ID   uint64 // its Raft ID (derived from Name)
	// Learner members replicate the log and serve reads and watches but
	// do not vote or count for commits.
	Learner bool
	// Zone is the member's failure domain, as it gossips it.
	Zone string
	// Role is MemberVoter, MemberLearner or MemberStandby (a learner that
	// may vote, kept in reserve by the autopilot).
	Role string
	// Health is how gossip sees the member: GossipAlive, GossipFailed,
	// GossipLeft, or GossipUnknown (not gossiping, or no gossip here).
	Health string
}

// catchUpEntries is how close to the leader's log a learner must be to be
// promoted: a voter that lags far would stall commits while it catches up.
const catchUpEntries = 100

// Members returns the cell's members as of a linearizable read.
func (n *Node) Members(ctx context.Context) ([]Member, error) {
	if err := n.raft.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	ms, err := n.members()
	return n.decorate(ms), err
}

// members returns the members as this member has applied them.
func (n *Node) members() ([]Member, error) {
	book, err := n.sm.Members()
	if err != nil {
		return nil, err
	}
	byID := map[uint64]Member{}
	for _, m := range book {
		byID[m.ID] = Member{Name: m.Name, Addr: m.Addr, ID: m.ID}
	}
	cs := n.sm.ConfState()
	var out []Member
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners()} {
		for _, id := range ids {
			m, ok := byID[id]
			if !ok {
				m = Member{ID: id, Name: fmt.Sprintf("%016x", id)}
			}
			m.Learner = slices.Contains(cs.GetLearners(), id)
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

func (n *Node) member(name string) (Member, bool, error) {
	ms, err := n.members()
	if err != nil {
		return Member{}, false, err
	}
	for _, m := range ms {
		if m.Name == name {
			return m, true, nil
		}
	}
	return Member{}, false, nil
}

// AddLearner adds a non-voting member: it replicates the log (from a
// snapshot first, if the log it needs was compacted), serves reads and
// watches, and does not slow commits. Start the new member with
// Config.Join. Promote makes it a voter once it has caught up.
func (n *Node) AddLearner(ctx context.Context, name, addr string) error {
	if name == "" {
		return fmt.Errorf("%w: a member needs a name", ErrInvalidConfig)
	}
	if n.cfg.Transport == nil {
		if err := checkAddr(addr); err != nil {
			return fmt.Errorf("%w: member %q: %v", ErrInvalidConfig, name, err)
		}
	} else if addr == "" {
		return fmt.Errorf("%w: member %q needs an address", ErrInvalidConfig, name)
	}
	if err := n.raft.ReadBarrier(ctx); err != nil {
		return err
	}
	if _, ok, err := n.member(name); err != nil || ok {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %q", ErrMemberExists, name)
	}
	id := raftnode.IDFromName(name)
	if removed, err := n.sm.WasRemoved(id); err != nil || removed {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %q belonged to a removed member; Raft IDs are never reused, choose another name", ErrMemberExists, name)
	}
	return n.raft.ChangeMembership(ctx, pb.ConfChangeAddLearnerNode, id, command.Member{Name: name, Addr: addr})
}

// Promote makes a learner a voter. It is refused with ErrNotCaughtUp until
// the learner's log is within a few entries of the leader's (a voter far
// behind would stall commits). It can be called on any member: a follower
// asks the leader.
func (n *Node) Promote(ctx context.Context, name string) error {
	for {
		err := n.promoteHere(ctx, name)
		if !errors.Is(err, errNotLeaderHere) {
			return err
		}
		err = n.admin.ask(ctx, adminRequest{Op: "promote", Name: name})
		if !errors.Is(err, errNotLeaderHere) {
			return err
		}
		// Leadership moved while we asked: look again.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNoQuorum, ctx.Err())
		case <-time.After(n.electionTimeout() / 4):
		}
	}
}

var errNotLeaderHere = errors.New("coord: this member does not lead")

// promoteHere promotes name if this member leads (errNotLeaderHere if not).
func (n *Node) promoteHere(ctx context.Context, name string) error {
	prs, last, leading, err := n.raft.Replication(ctx)
	if err != nil {
		return err
	}
	if !leading {
		return errNotLeaderHere
	}
	m, ok, err := n.member(name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownMember, name)
	}
	if !m.Learner {
		return nil // a voter already
	}
	pr := prs[m.ID]
	if !pr.RecentActive || pr.Match+catchUpEntries < last {
		return fmt.Errorf("%w: %q has %d of %d entries", ErrNotCaughtUp, name, pr.Match, last)
	}
	return n.raft.ChangeMembership(ctx, pb.ConfChangeAddNode, m.ID, command.Member{Name: m.Name, Addr: m.Addr})
}

// RemoveMember removes a member (voter or learner) from the cell. Its name
// cannot be used again. Removing the leader makes it step down first.
func (n *Node) RemoveMember(ctx context.Context, name string) error {
	if err := n.raft.ReadBarrier(ctx); err != nil {
		return err
	}
	m, ok, err := n.member(name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownMember, name)
	}
	return n.raft.ChangeMembership(ctx, pb.ConfChangeRemoveNode, m.ID, command.Member{Name: m.Name})
}

// --- the request a follower sends the leader (Promote) ---

// The channels multiplexed over raftnode's application messages.
const (
	appSessions byte = 'S'
	appAdmin    byte = 'A'
)

func (n *Node) sendApp(to string, channel byte, data []byte) error {
	return n.raft.SendApp(to, append([]byte{channel}, data...))
}

// onAppMessage is raftnode's OnMessage hook (raft loop: must not block).
func (n *Node) onAppMessage(from string, data []byte) {
	if len(data) == 0 {
		return
	}
	switch data[0] {
	case appSessions:
		n.sessions.onMessage(from, data[1:])
	case appAdmin:
		n.admin.onMessage(from, data[1:])
	}
}

type adminRequest struct {
	ID   uint64 `msgpack:"i"`
	Op   string `msgpack:"o"`
	Name string `msgpack:"n"`
}

type adminReply struct {
	ID   uint64 `msgpack:"i"`
	Code string `msgpack:"c"` // "" = done; else a sentinel's code
	Msg  string `msgpack:"m"`
}

type adminMessage struct {
	Req   *adminRequest `msgpack:"q,omitempty"`
	Reply *adminReply   `msgpack:"r,omitempty"`
}

// adminErrors are the errors a reply can carry, by code.
var adminErrors = map[string]error{
	"not-leader":     errNotLeaderHere,
	"not-caught-up":  ErrNotCaughtUp,
	"unknown-member": ErrUnknownMember,
	"no-quorum":      ErrNoQuorum,
	"ambiguous":      ErrAmbiguous,
}

// adminVersion leads every admin message (invariant 10 of DESIGN.md):
// a member refuses a version it does not know rather than misread it.
const adminVersion byte = 1

// maxAdminInFlight bounds the requests a leader serves at once. Only
// members can send them, and a member asks one at a time per caller, so
// a few suffice; the rest are dropped and their senders ask again.
const maxAdminInFlight = 4

// adminRPC carries membership requests from a follower to the leader.
type adminRPC struct {
	n       *Node
	mu      sync.Mutex
	waiting map[uint64]chan adminReply
	// slots holds a token per request being served: a flood of requests
	// costs at most maxAdminInFlight goroutines.
	slots chan struct{}
	wg    sync.WaitGroup
	// life ends when the node closes, cancelling requests being served.
	life    context.Context
	endLife context.CancelFunc
}

func newAdminRPC(n *Node) *adminRPC {
	a := &adminRPC{n: n, waiting: make(map[uint64]chan adminReply), slots: make(chan struct{}, maxAdminInFlight)}
	a.life, a.endLife = context.WithCancel(context.Background())
	return a
}

func (a *adminRPC) close() {
	a.endLife()
	a.wg.Wait()
}

func encodeAdmin(m *adminMessage) ([]byte, error) {
	data, err := msgpack.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte{adminVersion}, data...), nil
}

// ask sends req to the leader and waits for its reply.
func (a *adminRPC) ask(ctx context.Context, req adminRequest) error {
	st := a.n.raft.Status()
	leader, ok := a.n.raft.MemberName(st.Leader)
	if st.Leader == 0 || !ok {
		return errNotLeaderHere
	}
	req.ID = a.n.raft.NewRequestID()
	ch := make(chan adminReply, 1)
	a.mu.Lock()
	a.waiting[req.ID] = ch
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.waiting, req.ID)
		a.mu.Unlock()
	}()
	data, err := encodeAdmin(&adminMessage{Req: &req})
	if err != nil {
		return err
	}
	if err := a.n.sendApp(leader, appAdmin, data); err != nil {
		return err
	}
	select {
	case r := <-ch:
		if r.Code == "" {
			return nil
		}
		if sentinel, ok := adminErrors[r.Code]; ok {
			return fmt.Errorf("%w (from the leader: %s)", sentinel, r.Msg)
		}
		return errors.New(r.Msg)
	case <-time.After(4 * a.n.electionTimeout()):
		return errNotLeaderHere // lost, or the leader moved: look again
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrAmbiguous, ctx.Err())
	}
}

func (a *adminRPC) onMessage(from string, data []byte) {
	if len(data) == 0 || data[0] != adminVersion {
		return
	}
	data = data[1:]
	var m adminMessage
	if mpcheck.Check(data) != nil {
		return
	}
	if err := msgpack.Unmarshal(data, &m); err != nil {
		return
	}
	switch {
	case m.Reply != nil:
		a.mu.Lock()
		ch := a.waiting[m.Reply.ID]
		a.mu.Unlock()
		if ch != nil {
			select {
			case ch <- *m.Reply:
			default:
			}
		}
	case m.Req != nil && m.Req.Op == "promote":
		select {
		case a.slots <- struct{}{}:
		default:
			return // busy: the asker times out and asks again
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer func() { <-a.slots }()
			a.serve(from, m.Req)
		}()
	}
}

// serve carries out one request from member from and replies.
func (a *adminRPC) serve(from string, req *adminRequest) {
	ctx, cancel := context.WithTimeout(a.life, 4*a.n.electionTimeout())
	defer cancel()
	reply := adminReply{ID: req.ID}
	if err := a.n.promoteHere(ctx, req.Name); err != nil {
		reply.Code, reply.Msg = "other", err.Error()
		for code, sentinel := range adminErrors {
			if errors.Is(err, sentinel) {
				reply.Code = code
			}
		}
	}
	if data, err := encodeAdmin(&adminMessage{Reply: &reply}); err == nil {
		_ = a.n.sendApp(from, appAdmin, data)
	}
}
