package coord_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/coordcell/coord"
)

// diskCell starts a 3-member cell over TCP on loopback with data on disk
// and default timings: the shape the side-by-side comparison uses.
func diskCell(b *testing.B) []*coord.Node {
	b.Helper()
	dir := b.TempDir()
	var peers []coord.Peer
	for i := range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: l.Addr().String()})
		l.Close()
	}
	nodes := make([]*coord.Node, 3)
	for i, p := range peers {
		n, err := coord.Open(context.Background(), coord.Config{
			Name: p.Name, Addr: p.Addr, Peers: peers, DataDir: fmt.Sprintf("%s/%s", dir, p.Name),
		})
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = n
	}
	b.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	// Wait for a leader by writing once.
	if _, err := nodes[0].Put(context.Background(), "warmup", []byte("x")); err != nil {
		b.Fatal(err)
	}
	return nodes
}

func leaderOf(nodes []*coord.Node) *coord.Node {
	for _, n := range nodes {
		if n.Status().Role == coord.RoleLeader {
			return n
		}
	}
	return nodes[0]
}

// BenchmarkPut measures 100-byte puts through the leader with 1, 16 and
// 64 concurrent callers, and reports how many entries each fsync carried
// (the group-commit factor that makes concurrency pay).
func BenchmarkPut(b *testing.B) {
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			nodes := diskCell(b)
			leader := leaderOf(nodes)
			value := make([]byte, 100)
			st0 := leader.Status()
			var seq atomic.Int64
			b.SetParallelism((callers + 1) / 2) // GOMAXPROCS=2 on the reference machine
			if callers == 1 {
				b.SetParallelism(1)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					key := fmt.Sprintf("k%d", seq.Add(1)%1024)
					if _, err := leader.Put(ctx, key, value); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			st := leader.Status()
			if syncs := st.LogSyncs - st0.LogSyncs; syncs > 0 {
				b.ReportMetric(float64(st.LogEntries-st0.LogEntries)/float64(syncs), "entries/fsync")
			}
		})
	}
}

// BenchmarkGet measures linearizable and serializable reads on a
// follower with 16 concurrent callers.
func BenchmarkGet(b *testing.B) {
	for _, mode := range []string{"linearizable", "serializable"} {
		b.Run(mode, func(b *testing.B) {
			nodes := diskCell(b)
			var follower *coord.Node
			for _, n := range nodes {
				if n.Status().Role != coord.RoleLeader {
					follower = n
				}
			}
			ctx := context.Background()
			if _, err := follower.Put(ctx, "key", make([]byte, 100)); err != nil {
				b.Fatal(err)
			}
			var opts []coord.ReadOption
			if mode == "serializable" {
				opts = append(opts, coord.Serializable())
			}
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := follower.Get(ctx, "key", opts...); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkPutWithStuckWatchers compares puts on a one-member in-memory
// cell with no watchers and with 1,000 watchers of the written prefix
// whose consumers never read: they must not slow the writes.
func BenchmarkPutWithStuckWatchers(b *testing.B) {
	for _, watchers := range []int{0, 1000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			n, err := coord.Open(context.Background(), coord.Config{Name: "solo", Addr: "127.0.0.1:0"})
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for range watchers {
				n.Watch(ctx, "hot/", coord.WithMaxLag(0))
			}
			value := make([]byte, 100)
			if _, err := n.Put(ctx, "warmup", value); err != nil { // waits for the election
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := n.Put(ctx, fmt.Sprintf("hot/%d", i%64), value); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
