package etcdapi

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// BenchmarkRangeLimit is a Range of 100 keys (limit, with count and
// more) out of a 10,000-key prefix, through clientv3 over loopback to a
// one-member cell.
func BenchmarkRangeLimit(b *testing.B) {
	c := coordtest.NewCluster(b, 1)
	n := c.Node(0)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, n, l) }()
	b.Cleanup(func() {
		cancel()
		require.NoError(b, <-done)
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	require.NoError(b, n.Ready(wctx))
	val := []byte("0123456789abcdef")
	for i := 0; i < 10000; i += 100 {
		ops := make([]coord.Op, 0, 100)
		for j := i; j < i+100; j++ {
			ops = append(ops, coord.OpPut(fmt.Sprintf("p/%05d", j), val))
		}
		_, err := n.Txn(wctx).Then(ops...).Commit()
		require.NoError(b, err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{l.Addr().String()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	require.NoError(b, err)
	defer cli.Close()
	b.ResetTimer()
	for b.Loop() {
		resp, err := cli.Get(wctx, "p/", clientv3.WithPrefix(), clientv3.WithLimit(100))
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Kvs) != 100 || resp.Count != 10000 || !resp.More {
			b.Fatalf("got %d keys, count %d, more %v", len(resp.Kvs), resp.Count, resp.More)
		}
	}
}
