package coord_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
)

// diskCell starts a 3-member cell over TCP on loopback with data on disk
// and default timings: the shape the side-by-side comparison uses.
func diskCell(b *testing.B) []*coord.Node {
	b.Helper()
	dir := b.TempDir()
	var peers []coord.Peer
	for i, addr := range loopbackAddrs(b, 3) {
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: addr})
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

// BenchmarkWatchFanout measures the time from a put to its arrival at
// every one of N watchers of the key on one member (a 3-member in-memory
// cell; the put goes through another member), with p50/p99/max across
// watchers, and the heap each watcher costs.
func BenchmarkWatchFanout(b *testing.B) {
	for _, watchers := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			c := coordtest.NewCluster(b, 3)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			writer, server := c.Node(0), c.Node(1)
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			ws := make([]*coord.Watcher, watchers)
			for i := range ws {
				ws[i] = server.Watch(ctx, "fan/key")
			}
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			perWatcher := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(watchers)
			// Every watcher is current before timing starts.
			if _, err := writer.Put(ctx, "fan/key", []byte("warmup")); err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var lat []time.Duration
			var started atomic.Pointer[time.Time]
			var pending sync.WaitGroup
			pending.Add(watchers)
			for _, w := range ws {
				go func() {
					for range w.Events() {
						if t0 := started.Load(); t0 != nil {
							d := time.Since(*t0)
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
						}
						pending.Done()
					}
				}()
			}
			pending.Wait()
			b.ResetTimer()
			for range b.N {
				pending.Add(watchers)
				t0 := time.Now()
				started.Store(&t0)
				if _, err := writer.Put(ctx, "fan/key", []byte("v")); err != nil {
					b.Fatal(err)
				}
				pending.Wait()
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(perWatcher, "B/watcher")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
		})
	}
}

// BenchmarkWatchThroughput measures how many events one watcher consumes
// per second when it starts far behind (served from the history).
func BenchmarkWatchThroughput(b *testing.B) {
	n, err := coord.Open(context.Background(), coord.Config{Name: "solo", Addr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	const batch = 100
	first := n.Status().Revision
	for i := range 5000 / batch {
		txn := n.Txn(ctx)
		var ops []coord.Op
		for j := range batch {
			ops = append(ops, coord.OpPut(fmt.Sprintf("t/%d", j), []byte(fmt.Sprint(i))))
		}
		if _, err := txn.Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	events := 0
	for range b.N {
		wctx, cancel := context.WithCancel(ctx)
		w := n.Watch(wctx, "t/", coord.FromRev(first))
		for range 5000 {
			<-w.Events()
			events++
		}
		cancel()
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkLearnerSerializableGet measures serializable reads served by a
// learner of a 3-voter in-memory cell, 16 concurrent readers.
func BenchmarkLearnerSerializableGet(b *testing.B) {
	c := coordtest.NewCluster(b, 3)
	ctx := context.Background()
	leader := c.Leader()
	if _, err := leader.Put(ctx, "key", make([]byte, 100)); err != nil {
		b.Fatal(err)
	}
	if err := leader.Admin().AddLearner(ctx, "learner", "learner"); err != nil {
		b.Fatal(err)
	}
	l := c.Node(c.Join("learner"))
	for {
		if _, err := l.Get(ctx, "key", coord.Serializable()); err == nil {
			break
		}
		time.Sleep(time.Millisecond) // waiting for the learner's catch-up
	}
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Get(ctx, "key", coord.Serializable()); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
}

// BenchmarkLockCycles measures Lock+Unlock cycles on a 3-member cell over
// TCP with data on disk: 16 holders spread over the members, on one lock
// (contended) or one lock each (uncontended).
func BenchmarkLockCycles(b *testing.B) {
	for _, mode := range []string{"contended", "uncontended"} {
		b.Run(mode, func(b *testing.B) {
			nodes := diskCell(b)
			ctx := context.Background()
			const holders = 16
			mutexes := make([]*coord.Mutex, holders)
			for i := range mutexes {
				s, err := nodes[i%3].NewSession(ctx)
				if err != nil {
					b.Fatal(err)
				}
				name := "bench"
				if mode == "uncontended" {
					name = fmt.Sprintf("bench-%d", i)
				}
				mutexes[i] = coord.NewMutex(s, name)
			}
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, m := range mutexes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := m.Lock(ctx); err != nil {
							b.Error(err)
							return
						}
						if err := m.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}

// clientBenchCell is a 3-member in-memory cell serving clients, and the
// two ways into it the client benchmarks compare: the member n1 in
// process, and a client whose member is n1.
func clientBenchCell(b *testing.B) (coord.Cell, coord.Cell) {
	b.Helper()
	c := coordtest.NewCluster(b, 3, coordtest.WithClients())
	c.Leader()
	cl, err := c.Connect(context.Background(), func(cfg *coord.ClientConfig) { cfg.Members = []string{"n1"} })
	if err != nil {
		b.Fatal(err)
	}
	return c.Node(1), cl
}

// BenchmarkClientPut: sequential Puts through a client and in process on
// its member, side by side (same cell, same member).
func BenchmarkClientPut(b *testing.B) {
	member, client := clientBenchCell(b)
	for _, way := range []struct {
		name string
		cell coord.Cell
	}{{"member", member}, {"client", client}} {
		b.Run(way.name, func(b *testing.B) {
			ctx := context.Background()
			val := make([]byte, 128)
			for i := 0; b.Loop(); i++ {
				if _, err := way.cell.Put(ctx, fmt.Sprintf("bench/%d", i%1024), val); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClientMutexCycle: one holder's Lock+Unlock of an uncontended
// Mutex through a client and in process, side by side.
func BenchmarkClientMutexCycle(b *testing.B) {
	member, client := clientBenchCell(b)
	for _, way := range []struct {
		name string
		cell coord.Cell
	}{{"member", member}, {"client", client}} {
		b.Run(way.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := way.cell.NewSession(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(ctx)
			m := coord.NewMutex(s, "bench-"+way.name)
			for b.Loop() {
				if _, err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPutOneCaller measures one caller's puts through the leader and
// through a follower, and reports the latency p50 and p99: a stall on
// either path (a put waiting for a tick) shows in the p99 long before it
// shows in the mean. The 20ms-tick case tells a stall that waits for the
// next tick (its p99 shrinks with the tick) from one that does not, and
// the 3-tick heartbeat case one that waits for a heartbeat round from one
// that waits for the node's own tick work.
func BenchmarkPutOneCaller(b *testing.B) {
	for _, c := range []struct {
		via       string
		tick      time.Duration
		heartbeat int
	}{{"leader", 0, 0}, {"follower", 0, 0}, {"leader", 20 * time.Millisecond, 0}, {"leader", 0, 3}} {
		name := "via=" + c.via
		if c.tick > 0 {
			name += "/tick=" + c.tick.String()
		}
		if c.heartbeat > 0 {
			name += fmt.Sprintf("/heartbeat=%dticks", c.heartbeat)
		}
		b.Run(name, func(b *testing.B) {
			nodes := diskCellTick(b, c.tick, c.heartbeat)
			leader := leaderOf(nodes)
			n := leader
			if c.via == "follower" {
				for _, m := range nodes {
					if m != leader {
						n = m
						break
					}
				}
			}
			ctx := context.Background()
			value := make([]byte, 100)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if _, err := n.Put(ctx, fmt.Sprintf("k%d", i%1024), value); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
			b.ReportMetric(ms(0.50), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
		})
	}
}

// diskCellTick is diskCell with the Raft tick and the heartbeat interval
// in ticks set (0 keeps a default; the election timeout stays 10 ticks).
func diskCellTick(b *testing.B, tick time.Duration, heartbeat int) []*coord.Node {
	b.Helper()
	if tick == 0 && heartbeat == 0 {
		return diskCell(b)
	}
	dir := b.TempDir()
	var peers []coord.Peer
	for i, addr := range loopbackAddrs(b, 3) {
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: addr})
	}
	nodes := make([]*coord.Node, 0, 3)
	b.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	for _, p := range peers {
		n, err := coord.Open(context.Background(), coord.Config{
			Name: p.Name, Addr: p.Addr, Peers: peers, DataDir: fmt.Sprintf("%s/%s", dir, p.Name),
			TickInterval: tick, HeartbeatTicks: heartbeat,
		})
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	if _, err := nodes[0].Put(context.Background(), "warmup", []byte("x")); err != nil {
		b.Fatal(err)
	}
	return nodes
}

// BenchmarkClientWatchesHeld opens 200 watches of prefixes of their own
// through a client (none merged) and reports what each held watch costs
// the process once established: heap after a GC, goroutine stacks, and
// goroutines. The cell is in the same process, so the member's share (a
// goroutine and its hub entry) is in the figures too. A client's cost
// per watch is what bounds the watches one client process can hold.
func BenchmarkClientWatchesHeld(b *testing.B) {
	_, cl := clientBenchCell(b)
	ctx := context.Background()
	const n = 200
	var heap, stack, goroutines float64
	for i := 0; b.Loop(); i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		ws := make([]*coord.Watcher, 0, n)
		for j := range n {
			w := cl.Watch(ctx, fmt.Sprintf("held/%d/%d/", i, j))
			<-w.Ready()
			if err := w.Err(); err != nil {
				b.Fatal(err)
			}
			ws = append(ws, w)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap += float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		stack += float64(int64(after.StackInuse)-int64(before.StackInuse)) / n
		goroutines += float64(runtime.NumGoroutine()-g0) / n
		for _, w := range ws {
			w.Close()
		}
		for _, w := range ws {
			for range w.Events() {
			}
		}
	}
	b.ReportMetric(heap/float64(b.N), "heap-B/watch")
	b.ReportMetric(stack/float64(b.N), "stack-B/watch")
	b.ReportMetric(goroutines/float64(b.N), "goroutines/watch")
}
