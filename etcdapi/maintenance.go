package etcdapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"sync/atomic"

	"github.com/coordcell/coord"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// alarmState is the quota alarm as this front has seen it: raised by a
// write the cell refused for its quota, lowered by one it took (or by
// an Alarm DEACTIVATE).
type alarmState struct{ nospace atomic.Bool }

func (a *alarmState) wrote() { a.nospace.Store(false) }

// noteErr raises the alarm on a quota refusal.
func (a *alarmState) noteErr(err error) error {
	if err == rpctypes.ErrGRPCNoSpace {
		a.nospace.Store(true)
	}
	return err
}

// maintenanceServer is etcd's Maintenance service, on a member.
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *server
}

func (m *maintenanceServer) member() (*coord.Node, error) {
	if m.s.node == nil {
		return nil, unimplemented("Maintenance through a coord.Client (serve on a member)")
	}
	return m.s.node, nil
}

// memberIDs maps member names to their Raft IDs, etcd's member IDs.
func memberIDs(ctx context.Context, n *coord.Node) (map[string]coord.Member, error) {
	ms, err := n.Admin().Members(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]coord.Member, len(ms))
	for _, m := range ms {
		out[m.Name] = m
	}
	return out, nil
}

// Status reports the member: its leader, Raft term and indexes, and the
// version of etcd's API this front speaks. DbSize is WithDBSize's, else
// 1 (see WithDBSize).
func (m *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	n, err := m.member()
	if err != nil {
		return nil, err
	}
	st := n.Status()
	resp := &pb.StatusResponse{Header: m.s.header(st.Revision), Version: version.Version,
		RaftIndex: st.Commit, RaftTerm: st.Term, RaftAppliedIndex: st.Applied, StorageVersion: version.Version}
	resp.DbSize = 1
	if m.s.o.dbSize != nil {
		resp.DbSize = max(m.s.o.dbSize(), 1)
	}
	resp.DbSizeInUse = resp.DbSize
	ms, err := memberIDs(ctx, n)
	if err == nil {
		if l, ok := ms[st.Leader]; ok {
			resp.Leader = l.ID
		}
		if me, ok := ms[st.Name]; ok {
			resp.IsLearner = me.Learner
		}
	}
	if st.Leader == "" {
		resp.Errors = append(resp.Errors, "etcdserver: no leader")
	}
	return resp, nil
}

// Snapshot streams the member's online backup (coord's Node.Backup
// format, which coord.Restore reads; etcdutl cannot). etcd's clients
// want what etcd sends, a body of whole 512-byte blocks and its SHA-256
// after it (etcdctl refuses another length): the backup's body is sent
// as it comes, its own checksum checked and replaced by zero padding to
// the block and the checksum of body and padding, which the backup
// reader takes as it took the original (it reads the records its header
// counts and checks the trailing checksum of everything before it).
func (m *maintenanceServer) Snapshot(r *pb.SnapshotRequest, stream grpc.ServerStreamingServer[pb.SnapshotResponse]) error {
	n, err := m.member()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := n.Backup(ctx, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	send := func(b []byte) error {
		return stream.Send(&pb.SnapshotResponse{Header: m.s.header(-1), Blob: b, Version: version.Version})
	}
	sum := sha256.New()
	var size int64
	// held is the last sha256.Size bytes read: the backup's checksum,
	// once the backup ends.
	buf := make([]byte, 32<<10+sha256.Size)
	held := 0
	var sendErr error
	for {
		k, err := io.ReadFull(pr, buf[held:])
		held += k
		if out := held - sha256.Size; out > 0 && sendErr == nil {
			sum.Write(buf[:out])
			size += int64(out)
			sendErr = send(append([]byte(nil), buf[:out]...))
			if sendErr != nil {
				pr.CloseWithError(sendErr)
			}
			copy(buf, buf[out:held])
			held = sha256.Size
		}
		if err != nil {
			break
		}
	}
	if err := <-done; err != nil {
		return toGRPC(err)
	}
	if sendErr != nil {
		return sendErr
	}
	if held != sha256.Size || !bytes.Equal(sum.Sum(nil), buf[:sha256.Size]) {
		return status.Error(codes.DataLoss, "etcdapi: the backup's checksum does not match what was sent")
	}
	pad := make([]byte, (512-size%512)%512)
	sum.Write(pad)
	return send(append(pad, sum.Sum(nil)...))
}

// Alarm lists the quota alarm when the last write this front saw was
// refused for the quota; DEACTIVATE clears it; ACTIVATE is refused (the
// cell raises its own).
func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp := &pb.AlarmResponse{Header: m.s.header(-1)}
	switch r.Action {
	case pb.AlarmRequest_ACTIVATE:
		return nil, unimplemented("raising an alarm")
	case pb.AlarmRequest_DEACTIVATE:
		m.s.alarm.nospace.Store(false)
		return resp, nil
	}
	if m.s.alarm.nospace.Load() {
		var id uint64
		if m.s.node != nil {
			id = m.s.node.Status().ID
		}
		resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: id, Alarm: pb.AlarmType_NOSPACE})
	}
	return resp, nil
}

// Defragment succeeds without doing anything: coord's store (Pebble)
// compacts itself online and has no defragmentation to run.
func (m *maintenanceServer) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return &pb.DefragmentResponse{Header: m.s.header(-1)}, nil
}

// Hash is etcd's backend hash: coord's store has none to compare.
func (m *maintenanceServer) Hash(context.Context, *pb.HashRequest) (*pb.HashResponse, error) {
	return nil, unimplemented("Hash (coord's store has no etcd backend hash)")
}

// HashKV is etcd's keyspace hash at a revision: not computed by coord.
func (m *maintenanceServer) HashKV(context.Context, *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return nil, unimplemented("HashKV")
}

// MoveLeader hands leadership to the member of etcd ID TargetID (the
// Raft ID MemberList gives it) through Admin().MoveLeader, which any
// member may be asked (etcd asks the leader). Through a coord.Client
// there are no member IDs to name nor an Admin to ask.
func (m *maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	if m.s.node == nil {
		return nil, unimplemented("MoveLeader through a coord.Client (serve on a member)")
	}
	ms, err := m.s.node.Admin().Members(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	name := ""
	for _, mb := range ms {
		if mb.ID == r.TargetID {
			if mb.Learner {
				return nil, rpctypes.ErrGRPCBadLeaderTransferee
			}
			name = mb.Name
		}
	}
	if name == "" {
		return nil, rpctypes.ErrGRPCBadLeaderTransferee
	}
	switch err := m.s.node.Admin().MoveLeader(ctx, name); {
	case errors.Is(err, coord.ErrUnknownMember), errors.Is(err, coord.ErrInvalidArgument):
		// Removed or demoted since the list.
		return nil, rpctypes.ErrGRPCBadLeaderTransferee
	case err != nil:
		return nil, toGRPC(err)
	}
	return &pb.MoveLeaderResponse{Header: m.s.header(-1)}, nil
}

// Downgrade has no meaning for a coord cell.
func (m *maintenanceServer) Downgrade(context.Context, *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, unimplemented("Downgrade")
}

// authServer refuses etcd's users, roles and passwords: a coord cell
// names its clients by mTLS certificate (WithTLS), and a password scheme
// beside it would be a second, weaker door. AuthStatus says auth is off,
// which is true of etcd's auth.
type authServer struct {
	pb.UnimplementedAuthServer
}

var errAuth = status.Error(codes.FailedPrecondition,
	"etcdapi: etcd authentication is not supported: a coord cell identifies clients by their TLS certificate (see docs/etcd.md)")

// AuthStatus says etcd's auth is not enabled.
func (authServer) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return &pb.AuthStatusResponse{Header: &pb.ResponseHeader{}, Enabled: false}, nil
}

// Authenticate is refused as etcd refuses it with auth off.
func (authServer) Authenticate(context.Context, *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	return nil, rpctypes.ErrGRPCAuthNotEnabled
}
