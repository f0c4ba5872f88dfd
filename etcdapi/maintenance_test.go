package etcdapi

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMaintenanceAndCluster: Status, MemberList, Snapshot and Alarm
// answer from the member; what is not served says so.
func TestMaintenanceAndCluster(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	cli := f.client(t, f.eps[0])
	_, err := cli.Put(ctx, "s/k", "v")
	require.NoError(t, err)

	st, err := cli.Status(ctx, f.eps[0])
	require.NoError(t, err)
	assert.NotZero(t, st.Leader)
	assert.NotZero(t, st.RaftTerm)
	assert.NotZero(t, st.RaftIndex)
	assert.Equal(t, "3.7.3", st.Version)
	ml, err := cli.MemberList(ctx)
	require.NoError(t, err)
	require.Len(t, ml.Members, 3)
	ids := map[uint64]bool{}
	for _, m := range ml.Members {
		ids[m.ID] = true
		assert.NotEmpty(t, m.Name)
	}
	assert.True(t, ids[st.Leader], "the leader is a member")
	assert.True(t, ids[st.Header.MemberId])

	rc, err := cli.Snapshot(ctx)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = buf.ReadFrom(rc)
	require.NoError(t, err)
	rc.Close()
	info, kvs, err := coord.ReadBackup(&buf)
	require.NoError(t, err, "the snapshot is a coord backup")
	assert.NotZero(t, info)
	found := false
	for _, kv := range kvs {
		found = found || kv.Key == "s/k"
	}
	assert.True(t, found)

	al, err := cli.AlarmList(ctx)
	require.NoError(t, err)
	assert.Empty(t, al.Alarms)
	_, err = cli.Defragment(ctx, f.eps[0])
	require.NoError(t, err)

	_, err = cli.HashKV(ctx, f.eps[0], 0)
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	_, err = cli.MemberAdd(ctx, []string{"http://127.0.0.1:1"})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "a voter add: %v", err)
	assert.Contains(t, fmt.Sprint(err), "etcdapi")

	as, err := cli.AuthStatus(ctx)
	require.NoError(t, err)
	assert.False(t, as.Enabled)
	_, err = cli.UserAdd(ctx, "root", "pw")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "TLS certificate")
	_, err = cli.AuthEnable(ctx)
	require.Error(t, err)
	_, err = pb.NewAuthClient(cli.ActiveConnection()).Authenticate(ctx, &pb.AuthenticateRequest{Name: "u", Password: "p"})
	require.ErrorIs(t, rpctypes.Error(err), rpctypes.ErrAuthNotEnabled)
}

// TestBounds: a request past the message bound is refused before it is
// read and changes nothing; a stream's watches are bounded.
func TestBounds(t *testing.T) {
	f := newFront(t, nil, WithMaxRecvMsgSize(8<<10), WithMaxWatchesPerStream(2))
	ctx := tctx(t)
	cli := f.client(t, f.eps[0])

	_, err := cli.Put(ctx, "big", strings.Repeat("x", 16<<10))
	require.Error(t, err)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	g, err := cli.Get(ctx, "big")
	require.NoError(t, err)
	assert.Empty(t, g.Kvs, "nothing written")

	// The cell's own bound on a value (coord's MaxValueSize, 64 KiB)
	// answers as etcd's request-too-large.
	f2 := newFront(t, nil, WithMaxWatches(1))
	cli2 := f2.client(t, f2.eps[0])
	_, err = cli2.Put(ctx, "big", strings.Repeat("x", 100<<10))
	require.ErrorIs(t, err, rpctypes.ErrRequestTooLarge)

	// The server's bound on all watches: one here, freed when it ends.
	ctx1, cancel1 := context.WithCancel(ctx)
	require.True(t, next(t, cli2.Watch(ctx1, "a", clientv3.WithCreatedNotify())).Created)
	ctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	r := next(t, cli2.Watch(ctx2, "b"))
	require.Error(t, r.Err())
	assert.Contains(t, r.Err().Error(), "too many watches on this server")
	cancel1()
	require.Eventually(t, func() bool {
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		return next(t, cli2.Watch(wctx, "c", clientv3.WithCreatedNotify())).Created
	}, 20*time.Second, 50*time.Millisecond)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w1 := cli.Watch(wctx, "a", clientv3.WithCreatedNotify())
	w2 := cli.Watch(wctx, "b", clientv3.WithCreatedNotify())
	require.True(t, next(t, w1).Created)
	require.True(t, next(t, w2).Created)
	w3 := cli.Watch(wctx, "c")
	r = next(t, w3)
	require.Error(t, r.Err())
	assert.Contains(t, r.Err().Error(), "too many watches")
}

// TestServeOnClient serves the API through a coord.Client: KV, watch and
// leases work; what needs a member says so.
func TestServeOnClient(t *testing.T) {
	c := coordtest.NewCluster(t, 3, coordtest.WithClients())
	ctx := tctx(t)
	cl, err := c.Connect(ctx)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(sctx, cl, l) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()
	f := &front{c: c, eps: []string{l.Addr().String()}}
	cli := f.client(t)
	p, err := cli.Put(ctx, "k", "v")
	require.NoError(t, err)
	g, err := cli.Get(ctx, "k")
	require.NoError(t, err)
	require.Len(t, g.Kvs, 1)
	assert.Equal(t, p.Header.Revision, g.Kvs[0].ModRevision)
	lg, err := cli.Grant(ctx, 5)
	require.NoError(t, err)
	_, err = cli.Put(ctx, "e", "v", clientv3.WithLease(lg.ID))
	require.NoError(t, err)
	_, err = cli.Revoke(ctx, lg.ID)
	require.NoError(t, err)
	g, err = cli.Get(ctx, "e")
	require.NoError(t, err)
	assert.Empty(t, g.Kvs)
	_, err = cli.Status(ctx, f.eps[0])
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	_, err = cli.MoveLeader(ctx, 1)
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	assert.Contains(t, fmt.Sprint(err), "MoveLeader")
	wc := cli.Watch(ctx, "k", clientv3.WithRev(p.Header.Revision))
	r := next(t, wc)
	require.NoError(t, r.Err())
	require.Len(t, r.Events, 1)
	assert.Equal(t, "v", string(r.Events[0].Kv.Value))
	_, err = cli.Compact(ctx, p.Header.Revision)
	require.NoError(t, err)
}

// TestUnimplementedForms: what the front cannot run yet is answered
// Unimplemented, saying what, and changes nothing.
func TestUnimplementedForms(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t, f.eps[0])
	ctx := tctx(t)
	_, err := cli.Put(ctx, "k", "v")
	require.NoError(t, err)
	cases := map[string]func() error{
		"past revision in a nested txn": func() error {
			_, err := cli.Txn(ctx).Then(clientv3.OpTxn(nil,
				[]clientv3.Op{clientv3.OpGet("k", clientv3.WithRev(1)), clientv3.OpPut("n", "v")}, nil)).Commit()
			return err
		},
		"compare over a range": func() error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("a"), ">", 0).WithRange("z")).Then(clientv3.OpPut("n", "v")).Commit()
			return err
		},
		"past revision in a writing txn": func() error {
			_, err := cli.Txn(ctx).Then(clientv3.OpGet("k", clientv3.WithRev(1)), clientv3.OpPut("n", "v")).Commit()
			return err
		},
		"chosen lease ID": func() error {
			_, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 5, ID: 12345})
			return err
		},
	}
	for name, f := range cases {
		err := f()
		assert.Equal(t, codes.Unimplemented, status.Code(err), "%s: %v", name, err)
		assert.Contains(t, fmt.Sprint(err), "etcdapi", name)
	}
	g, err := cli.Get(ctx, "n")
	require.NoError(t, err)
	assert.Empty(t, g.Kvs, "nothing written")
}

// TestMoveLeader: MoveLeader to a member ID MemberList gives hands the
// cell's leadership to that member, asked of a follower's front; an ID
// no member has is etcd's bad transferee and moves nothing.
func TestMoveLeader(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	cli := f.client(t, f.eps[0])
	st, err := cli.Status(ctx, f.eps[0])
	require.NoError(t, err)
	ml, err := cli.MemberList(ctx)
	require.NoError(t, err)
	var target uint64
	for _, m := range ml.Members {
		if m.ID != st.Leader && m.ID != st.Header.MemberId {
			target = m.ID
		}
	}
	require.NotZero(t, target)
	_, err = cli.MoveLeader(ctx, target)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := cli.Status(ctx, f.eps[0])
		return err == nil && s.Leader == target
	}, 20*time.Second, 20*time.Millisecond, "the leader is the target")

	_, err = cli.MoveLeader(ctx, 12345)
	require.ErrorIs(t, rpctypes.Error(err), rpctypes.ErrBadLeaderTransferee)
	s, err := cli.Status(ctx, f.eps[0])
	require.NoError(t, err)
	assert.Equal(t, target, s.Leader, "a refused move moves nothing")
}
