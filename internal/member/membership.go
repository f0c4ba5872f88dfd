package member

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/coordcell/coord/internal/adminrpc"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/raftnode"
	"github.com/coordcell/coord/storage"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Member is one member of the cell (the root's Member).
type Member struct {
	Name       string
	Addr       string
	ClientAddr string
	ID         uint64
	Learner    bool
	Zone       string
	Role       string // memberVoter, memberLearner or memberStandby
	Health     string // gossipAlive ... gossipUnknown
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
		byID[m.ID] = Member{Name: m.Name, Addr: m.Addr, ClientAddr: m.ClientAddr, ID: m.ID}
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
		return fmt.Errorf("%w: a member needs a name", errs.InvalidConfig)
	}
	if err := n.checkPeerAddr(name, addr); err != nil {
		return err
	}
	if err := n.raft.ReadBarrier(ctx); err != nil {
		return err
	}
	if _, ok, err := n.member(name); err != nil || ok {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %q", errs.MemberExists, name)
	}
	id := raftnode.IDFromName(name)
	if removed, err := n.sm.WasRemoved(id); err != nil || removed {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %q belonged to a removed member; Raft IDs are never reused, choose another name", errs.MemberExists, name)
	}
	return n.raft.ChangeMembership(ctx, pb.ConfChangeAddLearnerNode, id, command.Member{Name: name, Addr: addr})
}

// checkPeerAddr refuses an address the transport cannot dial: over TCP
// (the default transport) host:port with a numeric port; with any
// transport, one the address book would not keep.
func (n *Node) checkPeerAddr(name, addr string) error {
	if n.cfg.Transport == nil {
		if err := CheckAddr(addr); err != nil {
			return fmt.Errorf("%w: member %q: %v", errs.InvalidConfig, name, err)
		}
	} else if addr == "" {
		return fmt.Errorf("%w: member %q needs an address", errs.InvalidConfig, name)
	}
	if !storage.ValidClientAddr(addr) {
		return fmt.Errorf("%w: member %q: address %q: at most %d bytes of printable characters without spaces",
			errs.InvalidConfig, name, addr, storage.MaxClientAddrLen)
	}
	return nil
}

// UpdateMember moves member name's transport address to addr in the
// replicated address book (etcd's MemberUpdate): every member's
// transport dials it there from when the change applies on that member.
// It returns once the change applied here. ErrInvalidConfig for an
// address the transport cannot use, ErrUnknownMember for no such member,
// ErrMemberExists for the address of another member; all change nothing.
// The address a member has is written again (for a member that missed
// it, on an older version).
func (n *Node) UpdateMember(ctx context.Context, name, addr string) error {
	if err := n.checkPeerAddr(name, addr); err != nil {
		return err
	}
	if err := n.raft.ReadBarrier(ctx); err != nil {
		return err
	}
	ms, err := n.members()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ms, func(m Member) bool { return m.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: %q", errs.UnknownMember, name)
	}
	m := ms[i]
	if j := slices.IndexFunc(ms, func(o Member) bool { return o.Addr == addr && o.Name != name }); j >= 0 {
		return fmt.Errorf("%w: address %q is member %q's", errs.MemberExists, addr, ms[j].Name)
	}
	// ClientAddr as the book has it: a member of an older version, which
	// does not know PeerAddr, applies the change as a client address
	// announcement, and must keep the one it has.
	return n.raft.ChangeMembership(ctx, pb.ConfChangeUpdateNode, m.ID,
		command.Member{Name: m.Name, Addr: m.Addr, ClientAddr: m.ClientAddr, PeerAddr: addr})
}

// Promote makes a learner a voter. It is refused with errs.NotCaughtUp until
// the learner's log is within a few entries of the leader's (a voter far
// behind would stall commits). It can be called on any member: a follower
// asks the leader.
func (n *Node) Promote(ctx context.Context, name string) error {
	return n.onLeader(ctx, adminrpc.OpPromote, name, func() error { return n.promoteHere(ctx, name) }, nil)
}

// onLeader runs here on this member if it leads, else asks the leader
// for op on name through the admin RPC, and then (if not nil) runs
// asked; while leadership moves under the question it looks again every
// quarter election timeout, until ctx ends (ErrNoQuorum).
func (n *Node) onLeader(ctx context.Context, op string, name string, here func() error, asked func() error) error {
	for {
		err := here()
		if !errors.Is(err, errNotLeaderHere) {
			return err
		}
		err = n.admin.rpc.Ask(ctx, adminrpc.Request{Op: op, Name: name})
		if err == nil && asked != nil {
			return asked()
		}
		if !errors.Is(err, errNotLeaderHere) {
			return err
		}
		// Leadership moved while we asked: look again.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
		case <-time.After(n.electionTimeout() / 4):
		}
	}
}

// MoveLeader hands the cell's leadership to the voter name: at once on
// the leader, else asked of it (the admin RPC). It returns once this
// member sees name lead: ErrUnknownMember for no such member,
// ErrInvalidArgument for a learner, ErrNoQuorum when the hand-over did
// not complete (the target cut off or behind: Raft abandons it after an
// election timeout, and the old leader carries on).
func (n *Node) MoveLeader(ctx context.Context, name string) error {
	return n.onLeader(ctx, adminrpc.OpMoveLeader, name, func() error { return n.moveLeaderHere(ctx, name) },
		// The leader saw name lead; so will this member, soon.
		func() error { return n.waitLeader(ctx, name) })
}

// moveLeaderHere moves leadership to name if this member leads
// (errNotLeaderHere if not).
func (n *Node) moveLeaderHere(ctx context.Context, name string) error {
	m, ok, err := n.member(name)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: %q", errs.UnknownMember, name)
	case m.Learner:
		return fmt.Errorf("%w: %q is a learner; only a voter can lead (Promote it first)", errs.InvalidArgument, name)
	}
	leading, err := n.raft.TransferLeader(ctx, m.ID)
	if !leading && err == nil {
		return errNotLeaderHere
	}
	return err
}

// waitLeader waits until this member sees name lead, within two election
// timeouts.
func (n *Node) waitLeader(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*n.electionTimeout())
	defer cancel()
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	for {
		if lead := n.raft.Status().Leader; lead != 0 {
			if got, ok := n.raft.MemberName(lead); ok && got == name {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %q leads, but this member has not heard it yet", errs.NoQuorum, name)
		case <-tick.C:
		}
	}
}

// errNotLeaderHere: this member does not lead, so it asks the leader.
var errNotLeaderHere = adminrpc.ErrNotLeader

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
		return fmt.Errorf("%w: %q", errs.UnknownMember, name)
	}
	if !m.Learner {
		return nil // a voter already
	}
	pr := prs[m.ID]
	// Match 0: it has never answered. Raft counts a new learner as
	// recently active, and a young log is shorter than catchUpEntries,
	// so without this a learner never started could become a voter.
	if !pr.RecentActive || pr.Match == 0 || pr.Match+catchUpEntries < last {
		return fmt.Errorf("%w: %q has %d of %d entries", errs.NotCaughtUp, name, pr.Match, last)
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
		return fmt.Errorf("%w: %q", errs.UnknownMember, name)
	}
	return n.raft.ChangeMembership(ctx, pb.ConfChangeRemoveNode, m.ID, command.Member{Name: m.Name})
}

// --- wiring internal/adminrpc ---

// appSessions is the channel of session keep-alives.
const appSessions = adminrpc.ChannelSessions

// sendApp sends data to member to on channel ch of raftnode's application
// messages.
func (n *Node) sendApp(to string, ch adminrpc.Channel, data []byte) error {
	return n.raft.SendApp(to, adminrpc.Frame(ch, data))
}

// onAppMessage is raftnode's OnMessage hook (raft loop: must not block).
func (n *Node) onAppMessage(from string, data []byte) { n.admin.mux.Deliver(from, data) }

// adminRPC is this member's end of the admin RPC, and the multiplexer it
// shares raftnode's application messages through with the sessions.
type adminRPC struct {
	rpc *adminrpc.RPC
	mux *adminrpc.Mux
}

// newAdminRPC wires the admin RPC to n. It runs before n.raft starts, so
// the functions given look n.raft up when called.
func newAdminRPC(n *Node) *adminRPC {
	log := n.cfg.Logger.With("member", n.cfg.Name)
	rpc := adminrpc.New(adminrpc.Config{
		Send: func(to string, payload []byte) error {
			return n.sendApp(to, adminrpc.ChannelAdmin, payload)
		},
		Leader: func() (string, bool) {
			lead := n.raft.Status().Leader
			if lead == 0 {
				return "", false
			}
			return n.raft.MemberName(lead)
		},
		NewID: func() uint64 { return n.raft.NewRequestID() },
		Serve: func(ctx context.Context, req adminrpc.Request) error {
			if req.Op == adminrpc.OpMoveLeader {
				return n.moveLeaderHere(ctx, req.Name)
			}
			return n.promoteHere(ctx, req.Name)
		},
		// Long enough for a leader to serve a promote through a slow
		// commit; a lost request or a moved leader costs this much.
		Wait:   4 * n.electionTimeout(),
		Logger: log,
	})
	mux := adminrpc.NewMux(log, map[adminrpc.Channel]adminrpc.Handler{
		adminrpc.ChannelSessions: n.sessions.onMessage,
		adminrpc.ChannelAdmin:    rpc.OnMessage,
	})
	return &adminRPC{rpc: rpc, mux: mux}
}

func (a *adminRPC) close() { a.rpc.Close() }

// CheckAddr accepts host:port with a numeric port (the host may be empty
// to listen on every interface).
func CheckAddr(addr string) error {
	if addr == "" {
		return errors.New("no address")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("address %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}
