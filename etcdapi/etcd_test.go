package etcdapi

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// front is a coordtest cell with the etcd API served on each member
// over loopback TCP.
type front struct {
	c   *coordtest.Cluster
	eps []string
}

// newFront starts a 3-member cell and serves etcdapi on every member
// until the test ends.
func newFront(t *testing.T, copts []coordtest.Option, opts ...Option) *front {
	t.Helper()
	c := coordtest.NewCluster(t, 3, copts...)
	f := &front{c: c}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, c.Size())
	for i := range c.Size() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		f.eps = append(f.eps, l.Addr().String())
		n := c.Node(i)
		go func() { done <- Serve(ctx, n, l, opts...) }()
	}
	served := c.Size() // a test may Join more members, served by none
	t.Cleanup(func() {
		cancel()
		for range served {
			require.NoError(t, <-done)
		}
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	for i := range c.Size() {
		require.NoError(t, c.Node(i).Ready(wctx))
	}
	return f
}

// client is an unchanged clientv3 client of the given endpoints (all of
// the front's when none), closed when the test ends.
func (f *front) client(t *testing.T, eps ...string) *clientv3.Client {
	t.Helper()
	if len(eps) == 0 {
		eps = f.eps
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var _ = coord.ErrNotFound

func contextWithCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}
