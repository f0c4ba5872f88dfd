package gossip

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGossip100 runs 100 members with memberlist's LAN timings
// (probe 1s, gossip 200ms, push-pull 30s) over the in-memory network and,
// once all see all, measures what gossip costs each member over a
// 30-second window (one push-pull period): CPU (ms of CPU per second) and
// bytes sent per second. Run it with -benchtime=1x, without -race.
func BenchmarkGossip100(b *testing.B) {
	const members = 100
	window := 30 * time.Second
	if testing.Short() {
		window = 5 * time.Second
	}
	for b.Loop() {
		net := NewMemNetwork()
		var gs []*Gossip
		var seed string
		for i := range members {
			tr, addr := net.Endpoint(fmt.Sprintf("m%03d", i))
			cfg := Config{Name: fmt.Sprintf("m%03d", i), Transport: tr, Meta: Meta{ID: uint64(i + 1), Addr: "10.0.0.1:7000", Zone: "zone-a"}}
			if i > 0 {
				cfg.Seeds = []string{seed}
			} else {
				seed = addr
			}
			g, err := Start(cfg)
			if err != nil {
				b.Fatal(err)
			}
			gs = append(gs, g)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for _, g := range gs {
			for {
				ch := g.Changed()
				if count(g.Members(), StateAlive) == members {
					break
				}
				select {
				case <-ch:
				case <-time.After(time.Until(deadline)):
					b.Fatalf("%s sees %d alive of %d", g.cfg.Name, count(g.Members(), StateAlive), members)
				}
			}
		}
		bytes0, cpu0, t0 := net.Bytes(), cpuTime(b), time.Now()
		time.Sleep(window) // the measurement window: gossip runs on its own timers
		bytes1, cpu1, el := net.Bytes(), cpuTime(b), time.Since(t0)
		b.ReportMetric(float64(bytes1-bytes0)/el.Seconds()/members, "B/s/member")
		b.ReportMetric(float64(cpu1-cpu0)/float64(time.Millisecond)/el.Seconds()/members, "cpu-ms/s/member")
		for _, g := range gs {
			g.Close()
		}
	}
}
