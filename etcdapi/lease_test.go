package etcdapi

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// present reports whether key exists, read through cli.
func present(t *testing.T, cli *clientv3.Client, key string) bool {
	t.Helper()
	g, err := cli.Get(context.Background(), key)
	require.NoError(t, err)
	return len(g.Kvs) > 0
}

// TestLeaseKeepAliveAndExpiry grants a lease, keeps it alive past
// several TTLs, and sees its key deleted once the keep-alives stop;
// then revokes another.
func TestLeaseKeepAliveAndExpiry(t *testing.T) {
	t.Parallel() // it waits on TTLs more than it works
	f := newFront(t, nil)
	cli := f.client(t)
	ctx := tctx(t)

	g, err := cli.Grant(ctx, 2)
	require.NoError(t, err)
	assert.EqualValues(t, 2, g.TTL)
	_, err = cli.Put(ctx, "l/key", "v", clientv3.WithLease(g.ID))
	require.NoError(t, err)
	gr, err := cli.Get(ctx, "l/key")
	require.NoError(t, err)
	assert.Equal(t, int64(g.ID), gr.Kvs[0].Lease)

	kctx, kcancel := context.WithCancel(ctx)
	ka, err := cli.KeepAlive(kctx, g.ID)
	require.NoError(t, err)
	var last time.Time
	deadline := time.Now().Add(2 * 2 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case r, ok := <-ka:
			require.True(t, ok)
			assert.EqualValues(t, 2, r.TTL)
			last = time.Now()
		case <-time.After(20 * time.Second):
			t.Fatal("no keep-alive answer")
		}
	}
	assert.True(t, present(t, cli, "l/key"), "kept alive past 2 TTLs")

	ttl, err := cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	require.NoError(t, err)
	assert.EqualValues(t, 2, ttl.GrantedTTL)
	assert.Greater(t, ttl.TTL, int64(-1))
	assert.Equal(t, [][]byte{[]byte("l/key")}, ttl.Keys)
	ls, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Contains(t, ls.Leases, clientv3.LeaseStatus{ID: g.ID})

	kcancel()
	require.Eventually(t, func() bool { return !present(t, cli, "l/key") }, 20*time.Second, 20*time.Millisecond)
	gone := time.Since(last)
	t.Logf("lease of TTL 2s expired %v after its last keep-alive", gone)
	assert.Less(t, gone, 3*2*time.Second)
	ttl, err = cli.TimeToLive(ctx, g.ID)
	require.NoError(t, err)
	assert.EqualValues(t, -1, ttl.TTL)
	_, err = cli.KeepAliveOnce(ctx, g.ID)
	require.ErrorIs(t, err, rpctypes.ErrLeaseNotFound)
	_, err = cli.Put(ctx, "l/late", "v", clientv3.WithLease(g.ID))
	require.ErrorIs(t, err, rpctypes.ErrLeaseNotFound)

	g2, err := cli.Grant(ctx, 30)
	require.NoError(t, err)
	_, err = cli.Put(ctx, "l/rev", "v", clientv3.WithLease(g2.ID))
	require.NoError(t, err)
	_, err = cli.Revoke(ctx, g2.ID)
	require.NoError(t, err)
	assert.False(t, present(t, cli, "l/rev"))
	_, err = cli.Revoke(ctx, g2.ID)
	require.ErrorIs(t, err, rpctypes.ErrLeaseNotFound)

	_, err = cli.Grant(ctx, 100*3600)
	require.ErrorIs(t, err, rpctypes.ErrLeaseTTLTooLarge)
	_, err = cli.Lease.Grant(ctx, 0)
	require.NoError(t, err, "a TTL below the minimum is raised, as etcd raises it")
}

// TestLeaseAcrossMembers grants a lease through one member, keeps it
// alive through a second and writes with it through the third: the
// lease lives as long as any front hears keep-alives, and expires when
// they stop.
func TestLeaseAcrossMembers(t *testing.T) {
	t.Parallel() // it waits on TTLs more than it works
	f := newFront(t, nil)
	c0, c1, c2 := f.client(t, f.eps[0]), f.client(t, f.eps[1]), f.client(t, f.eps[2])
	ctx := tctx(t)

	g, err := c0.Grant(ctx, 2)
	require.NoError(t, err)
	kctx, kcancel := context.WithCancel(ctx)
	ka, err := c1.KeepAlive(kctx, g.ID)
	require.NoError(t, err)
	_, err = c2.Put(ctx, "x/key", "v", clientv3.WithLease(g.ID))
	require.NoError(t, err)
	deadline := time.Now().Add(2 * 2 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case r, ok := <-ka:
			require.True(t, ok)
			require.EqualValues(t, 2, r.TTL)
		case <-time.After(20 * time.Second):
			t.Fatal("no keep-alive answer")
		}
	}
	assert.True(t, present(t, c0, "x/key"), "kept alive through another member past 2 TTLs")
	kcancel()
	require.Eventually(t, func() bool { return !present(t, c0, "x/key") }, 20*time.Second, 20*time.Millisecond)
}

// TestLeaseBadIDs: lease IDs no session has (0, negative, never
// granted) are not found, and create nothing.
func TestLeaseBadIDs(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t, f.eps[0])
	ctx := tctx(t)
	for _, id := range []clientv3.LeaseID{0, -5, 1 << 40} {
		_, err := cli.KeepAliveOnce(ctx, id)
		require.ErrorIs(t, err, rpctypes.ErrLeaseNotFound, "keep-alive of %d", id)
		_, err = cli.Revoke(ctx, id)
		require.ErrorIs(t, err, rpctypes.ErrLeaseNotFound, "revoke of %d", id)
		ttl, err := cli.TimeToLive(ctx, id)
		require.NoError(t, err)
		assert.EqualValues(t, -1, ttl.TTL, "time to live of %d", id)
	}
	ls, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Empty(t, ls.Leases, "no lease was made")
}
