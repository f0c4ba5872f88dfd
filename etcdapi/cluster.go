package etcdapi

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/coordcell/coord"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clusterServer is etcd's Cluster service, over the member's Admin. A
// member's etcd ID is its Raft ID (what MemberList gives), its peer URL
// its transport address.
//
// etcd names a member when it starts; coord names it when it is added
// (its Raft ID derives from the name), so MemberAdd takes the name from
// the peer URL: its user part (http://NAME@host:port) if it has one, else
// the address host:port itself. Start the new member with that
// Config.Name and the Addr host:port.
type clusterServer struct {
	pb.UnimplementedClusterServer
	s *server
}

// errVoterAdd refuses MemberAdd of a voter: coord adds a member as a
// learner and promotes it once it has caught up, so that a member that
// has not yet started, or is still behind, never counts toward a commit.
var errVoterAdd = status.Error(codes.FailedPrecondition,
	"etcdapi: coord adds members as learners: MemberAddAsLearner (etcdctl member add --learner), "+
		"start the member, then MemberPromote once it has caught up")

func (c *clusterServer) admin(call string) (*coord.Admin, error) {
	if c.s.node == nil {
		return nil, unimplemented(call + " through a coord.Client (serve on a member)")
	}
	return c.s.node.Admin(), nil
}

// MemberList lists the cell's members: peer URL its transport address,
// client URL the address it serves coord clients on (when it announced
// one), not this etcd front's.
func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	a, err := c.admin("MemberList")
	if err != nil {
		return nil, err
	}
	ms, err := c.members(ctx, a)
	if err != nil {
		return nil, err
	}
	return &pb.MemberListResponse{Header: c.s.header(-1), Members: ms}, nil
}

// members lists the members as etcd's.
func (c *clusterServer) members(ctx context.Context, a *coord.Admin) ([]*pb.Member, error) {
	ms, err := a.Members(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	out := make([]*pb.Member, len(ms))
	for i, m := range ms {
		out[i] = toMember(m)
	}
	return out, nil
}

func toMember(m coord.Member) *pb.Member {
	pm := &pb.Member{ID: m.ID, Name: m.Name, IsLearner: m.Learner}
	if m.Addr != "" {
		pm.PeerURLs = []string{m.Addr}
	}
	if m.ClientAddr != "" {
		pm.ClientURLs = []string{m.ClientAddr}
	}
	return pm
}

// byID finds the member of etcd ID id (ErrGRPCMemberNotFound).
func byID(ctx context.Context, a *coord.Admin, id uint64) (coord.Member, error) {
	ms, err := a.Members(ctx)
	if err != nil {
		return coord.Member{}, toGRPC(err)
	}
	for _, m := range ms {
		if m.ID == id {
			return m, nil
		}
	}
	return coord.Member{}, rpctypes.ErrGRPCMemberNotFound
}

// peerURL reads the one peer URL a member has: http(s)://[NAME@]host:port,
// or host:port alone. It returns the address and the name the URL gives
// ("" for none).
func peerURL(urls []string) (addr, name string, err error) {
	if len(urls) != 1 {
		return "", "", status.Errorf(codes.InvalidArgument,
			"etcdapi: a coord member has one peer URL, not %d", len(urls))
	}
	in := strings.TrimSpace(urls[0])
	if !strings.Contains(in, "://") {
		return in, "", nil
	}
	u, err := url.Parse(in)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", "", rpctypes.ErrGRPCMemberBadURLs
	}
	if u.User != nil {
		name = u.User.Username()
		if _, hasPassword := u.User.Password(); hasPassword || name == "" {
			return "", "", rpctypes.ErrGRPCMemberBadURLs
		}
	}
	return u.Host, name, nil
}

// MemberAdd adds a learner (Admin.AddLearner) named by its peer URL (see
// clusterServer); a voter is refused (errVoterAdd). A peer URL another
// member has is etcd's ErrGRPCPeerURLExist, a name a member has or had
// ErrGRPCMemberExist (names, and so IDs, are never reused: give the URL
// another NAME@).
func (c *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	a, err := c.admin("MemberAdd")
	if err != nil {
		return nil, err
	}
	addr, name, err := peerURL(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	if !r.IsLearner {
		return nil, errVoterAdd
	}
	if name == "" {
		name = addr
	}
	ms, err := a.Members(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	for _, m := range ms {
		switch {
		case m.Addr == addr:
			return nil, rpctypes.ErrGRPCPeerURLExist
		case m.Name == name:
			return nil, rpctypes.ErrGRPCMemberExist
		}
	}
	switch err := a.AddLearner(ctx, name, addr); {
	case errors.Is(err, coord.ErrMemberExists):
		return nil, status.Error(codes.FailedPrecondition, fmt.Sprintf("etcdapi: %v "+
			"(a removed member's name is never used again: name the new member in its peer URL, http://NAME@%s)", err, addr))
	case errors.Is(err, coord.ErrInvalidConfig):
		return nil, rpctypes.ErrGRPCMemberBadURLs
	case err != nil:
		return nil, toGRPC(err)
	}
	added, all, err := c.added(ctx, a, name)
	if err != nil {
		return nil, err
	}
	return &pb.MemberAddResponse{Header: c.s.header(-1), Member: added, Members: all}, nil
}

// added returns the member just added as name, and every member.
func (c *clusterServer) added(ctx context.Context, a *coord.Admin, name string) (*pb.Member, []*pb.Member, error) {
	all, err := c.members(ctx, a)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range all {
		if m.Name == name {
			return m, all, nil
		}
	}
	return nil, nil, rpctypes.ErrGRPCMemberNotFound // removed since: as etcd, it is gone
}

// MemberRemove removes the member of etcd ID ID (Admin.RemoveMember).
func (c *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	a, err := c.admin("MemberRemove")
	if err != nil {
		return nil, err
	}
	m, err := byID(ctx, a, r.ID)
	if err != nil {
		return nil, err
	}
	if err := memberErr(a.RemoveMember(ctx, m.Name)); err != nil {
		return nil, err
	}
	all, err := c.members(ctx, a)
	if err != nil {
		return nil, err
	}
	return &pb.MemberRemoveResponse{Header: c.s.header(-1), Members: all}, nil
}

// MemberPromote makes the learner of etcd ID ID a voter (Admin.Promote):
// ErrGRPCMemberNotLearner for a voter, ErrGRPCLearnerNotReady until it has
// caught up.
func (c *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	a, err := c.admin("MemberPromote")
	if err != nil {
		return nil, err
	}
	m, err := byID(ctx, a, r.ID)
	if err != nil {
		return nil, err
	}
	if !m.Learner {
		return nil, rpctypes.ErrGRPCMemberNotLearner
	}
	if err := memberErr(a.Promote(ctx, m.Name)); err != nil {
		return nil, err
	}
	all, err := c.members(ctx, a)
	if err != nil {
		return nil, err
	}
	return &pb.MemberPromoteResponse{Header: c.s.header(-1), Members: all}, nil
}

// MemberUpdate moves the member of etcd ID ID to its new peer URL
// (Admin.UpdateMember): ErrGRPCPeerURLExist for another member's,
// ErrGRPCMemberBadURLs for one the transport cannot dial.
func (c *clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	a, err := c.admin("MemberUpdate")
	if err != nil {
		return nil, err
	}
	m, err := byID(ctx, a, r.ID)
	if err != nil {
		return nil, err
	}
	addr, name, err := peerURL(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	if name != "" && name != m.Name {
		return nil, status.Errorf(codes.InvalidArgument,
			"etcdapi: the peer URL names %q, the member is %q (a member's name cannot change)", name, m.Name)
	}
	if err := memberErr(a.UpdateMember(ctx, m.Name, addr)); err != nil {
		return nil, err
	}
	all, err := c.members(ctx, a)
	if err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Header: c.s.header(-1), Members: all}, nil
}

// memberErr answers a membership change's error in etcd's words.
func memberErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coord.ErrUnknownMember):
		return rpctypes.ErrGRPCMemberNotFound // removed since it was found
	case errors.Is(err, coord.ErrNotCaughtUp):
		return rpctypes.ErrGRPCLearnerNotReady
	case errors.Is(err, coord.ErrMemberExists):
		return rpctypes.ErrGRPCPeerURLExist
	case errors.Is(err, coord.ErrInvalidConfig):
		return rpctypes.ErrGRPCMemberBadURLs
	}
	return toGRPC(err)
}
