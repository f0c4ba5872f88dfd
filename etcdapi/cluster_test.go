package etcdapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// requireEtcdErr checks that err is etcd's want as clientv3 hands it on
// (its rpctypes.EtcdError, matched on code and message).
func requireEtcdErr(t *testing.T, err, want error) {
	t.Helper()
	require.ErrorIs(t, err, rpctypes.Error(want))
}

func memberByName(t *testing.T, cli *clientv3.Client, name string) (*clientv3.MemberListResponse, int) {
	t.Helper()
	ml, err := cli.MemberList(tctx(t))
	require.NoError(t, err)
	for i, m := range ml.Members {
		if m.Name == name {
			return ml, i
		}
	}
	return ml, -1
}

// TestClusterMembership: clientv3's MemberAddAsLearner, MemberPromote,
// MemberUpdate and MemberRemove change the cell's membership as
// Admin's calls do, a member named by the user part of its peer URL (or
// its address); a voter add is refused with coord's reason; every bad
// request gets etcd's own error and changes nothing.
func TestClusterMembership(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	cli := f.client(t, f.eps[1])

	_, err := cli.MemberAdd(ctx, []string{"http://n3@n3:2380"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "learner")
	add, err := cli.MemberAddAsLearner(ctx, []string{"http://n3@n3:2380"})
	require.NoError(t, err)
	require.Equal(t, "n3", add.Member.Name)
	require.True(t, add.Member.IsLearner)
	require.Equal(t, []string{"n3:2380"}, add.Member.PeerURLs)
	require.Len(t, add.Members, 4, "the response lists every member")
	id := add.Member.ID
	require.NotZero(t, id)
	// Without a user part the address is the name.
	other, err := cli.MemberAddAsLearner(ctx, []string{"http://10.9.9.9:2380"})
	require.NoError(t, err)
	require.Equal(t, "10.9.9.9:2380", other.Member.Name)

	_, err = cli.MemberAddAsLearner(ctx, []string{"http://other@n3:2380"})
	requireEtcdErr(t, err, rpctypes.ErrGRPCPeerURLExist)
	_, err = cli.MemberAddAsLearner(ctx, []string{"http://n3@n9:2380"})
	requireEtcdErr(t, err, rpctypes.ErrGRPCMemberExist)
	_, err = cli.MemberAddAsLearner(ctx, []string{"http://a:1", "http://b:1"})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "one peer URL: %v", err)

	// Not started: not caught up.
	_, err = cli.MemberPromote(ctx, id)
	requireEtcdErr(t, err, rpctypes.ErrGRPCLearnerNotReady)
	f.c.Join("n3")
	require.Eventually(t, func() bool {
		_, err := cli.MemberPromote(ctx, id)
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "the learner is promoted once it has caught up")
	ml, i := memberByName(t, cli, "n3")
	require.False(t, ml.Members[i].IsLearner)
	_, err = cli.MemberPromote(ctx, id)
	requireEtcdErr(t, err, rpctypes.ErrGRPCMemberNotLearner)

	up, err := cli.MemberUpdate(ctx, id, []string{"http://n3:2390"})
	require.NoError(t, err)
	require.Len(t, up.Members, 5)
	ml, i = memberByName(t, cli, "n3")
	require.Equal(t, []string{"n3:2390"}, ml.Members[i].PeerURLs)
	_, err = cli.MemberUpdate(ctx, id, []string{"http://10.9.9.9:2380"})
	requireEtcdErr(t, err, rpctypes.ErrGRPCPeerURLExist)
	_, err = cli.MemberUpdate(ctx, id, []string{"http://someone@n3:2391"})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "a member's name cannot change: %v", err)
	ml, i = memberByName(t, cli, "n3")
	require.Equal(t, []string{"n3:2390"}, ml.Members[i].PeerURLs, "refused updates changed nothing")

	_, err = cli.MemberRemove(ctx, other.Member.ID)
	require.NoError(t, err)
	rm, err := cli.MemberRemove(ctx, id)
	require.NoError(t, err)
	require.Len(t, rm.Members, 3)
	_, i = memberByName(t, cli, "n3")
	require.Equal(t, -1, i)
	for _, call := range []func() error{
		func() error { _, err := cli.MemberRemove(ctx, id); return err },
		func() error { _, err := cli.MemberPromote(ctx, id); return err },
		func() error { _, err := cli.MemberUpdate(ctx, id, []string{"http://n3:2392"}); return err },
	} {
		requireEtcdErr(t, call(), rpctypes.ErrGRPCMemberNotFound)
	}
	// Its name is spent: the error says how to name the next one.
	_, err = cli.MemberAddAsLearner(ctx, []string{"http://n3@n3:2380"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "NAME@")

}
