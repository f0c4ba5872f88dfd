package etcdapi

import (
	"context"
	"errors"
	"sync"

	"github.com/coordcell/coord"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errNotLeader is etcd's answer to a Proclaim or Resign by a candidate
// that does not lead (concurrency.ErrElectionNotLeader's text).
var errNotLeader = status.Error(codes.FailedPrecondition, "election: not leader")

// electionServer is etcd's v3election service over coord's Election: a
// campaign through it is a candidate of the same queue as Go's
// coord.NewElection(session, name), with the same keys and tokens.
type electionServer struct {
	v3electionpb.UnimplementedElectionServer
	s *server

	mu sync.Mutex
	// held maps the key of each candidacy made through this front that
	// won to its Election, for Proclaim and Resign.
	held map[string]*coord.Election
}

func (es *electionServer) hold(e *coord.Election) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.held == nil {
		es.held = make(map[string]*coord.Election)
	}
	es.held[e.Key()] = e
}

func (es *electionServer) find(l *v3electionpb.LeaderKey) *coord.Election {
	if l == nil {
		return nil
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	return es.held[string(l.Key)]
}

// Campaign waits until the lease's candidacy leads name, with value.
func (es *electionServer) Campaign(ctx context.Context, r *v3electionpb.CampaignRequest) (*v3electionpb.CampaignResponse, error) {
	if r.Lease == 0 {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	sess, release, err := es.s.leases.pin(ctx, r.Lease)
	if err != nil {
		return nil, err
	}
	defer release()
	e := coord.NewElection(sess, string(r.Name))
	tok, err := e.Campaign(ctx, string(r.Value))
	if err != nil {
		return nil, toGRPC(err)
	}
	es.hold(e)
	return &v3electionpb.CampaignResponse{Header: es.s.header(int64(tok)), Leader: &v3electionpb.LeaderKey{
		Name: r.Name, Key: []byte(e.Key()), Rev: etcdKeyRev(int64(tok)), Lease: r.Lease}}, nil
}

// Proclaim changes the leader's value.
func (es *electionServer) Proclaim(ctx context.Context, r *v3electionpb.ProclaimRequest) (*v3electionpb.ProclaimResponse, error) {
	e := es.find(r.Leader)
	if e == nil {
		return nil, errNotLeader
	}
	if err := e.Proclaim(ctx, string(r.Value)); err != nil {
		if errors.Is(err, coord.ErrNotLeader) || errors.Is(err, coord.ErrNotHeld) {
			return nil, errNotLeader
		}
		return nil, toGRPC(err)
	}
	return &v3electionpb.ProclaimResponse{Header: es.s.header(-1)}, nil
}

// Resign gives up the leadership (or the candidacy).
func (es *electionServer) Resign(ctx context.Context, r *v3electionpb.ResignRequest) (*v3electionpb.ResignResponse, error) {
	e := es.find(r.Leader)
	if e == nil {
		if r.Leader == nil || len(r.Leader.Key) == 0 {
			return nil, status.Error(codes.InvalidArgument, `"leader" field must be provided`)
		}
		// Made through another front, or let go since: the key is the
		// candidacy.
		rev, err := es.s.cell.Delete(ctx, string(r.Leader.Key))
		if err != nil {
			return nil, toGRPC(err)
		}
		return &v3electionpb.ResignResponse{Header: es.s.header(rev)}, nil
	}
	es.mu.Lock()
	delete(es.held, e.Key())
	es.mu.Unlock()
	if err := e.Resign(ctx); err != nil && !errors.Is(err, coord.ErrNotHeld) {
		return nil, toGRPC(err)
	}
	return &v3electionpb.ResignResponse{Header: es.s.header(-1)}, nil
}

// leaderKV is a coord leader as etcd's election key.
func leaderKV(l coord.Leader) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(l.Key), Value: []byte(l.Value),
		CreateRevision: etcdKeyRev(int64(l.Token)), Lease: int64(l.Session)}
}

// Leader returns the leader's key, or etcd's "no leader" error.
func (es *electionServer) Leader(ctx context.Context, r *v3electionpb.LeaderRequest) (*v3electionpb.LeaderResponse, error) {
	l, err := coord.ElectionLeader(ctx, es.s.cell, string(r.Name))
	if errors.Is(err, coord.ErrNoLeader) || err == nil && l.Vacant {
		return nil, status.Error(codes.NotFound, "election: no leader")
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	kv := leaderKV(l)
	if full, err := es.s.cell.Get(ctx, l.Key); err == nil {
		kv = toKV(full, false)
	}
	return &v3electionpb.LeaderResponse{Header: es.s.header(-1), Kv: kv}, nil
}

// Observe streams each new leader (and value) until the client ends it.
func (es *electionServer) Observe(r *v3electionpb.LeaderRequest, stream grpc.ServerStreamingServer[v3electionpb.LeaderResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	for l := range coord.ObserveElection(ctx, es.s.cell, string(r.Name)) {
		if l.Vacant {
			continue
		}
		if err := stream.Send(&v3electionpb.LeaderResponse{Header: es.s.header(-1), Kv: leaderKV(l)}); err != nil {
			return nil
		}
	}
	return nil
}
