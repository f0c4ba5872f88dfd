package coord_test

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// cpuTime is the CPU time this process has used (user and system).
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIdleLeaderCostOfAbandonedSessions measures what sessions nobody
// keeps alive cost an idle cell: a three-member cell (in one process, the
// default timing) holds COORD_IDLE_SESSIONS (default 200,000) sessions of
// an hour's TTL whose holder left, and a new leader has loaded them (the
// case where every one is silent from the election on). Over a window of
// 30 s it reports the process's CPU, against the same cell's with no
// sessions, and the log entries written. It runs with -soak or
// COORD_SOAK, without -race for figures worth reading.
func TestIdleLeaderCostOfAbandonedSessions(t *testing.T) {
	if *soak == 0 && os.Getenv("COORD_SOAK") == "" {
		t.Skip("a measurement: runs with -soak or COORD_SOAK")
	}
	n := 200_000
	if v := os.Getenv("COORD_IDLE_SESSIONS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		cfg.TickInterval, cfg.ElectionTicks, cfg.HeartbeatTicks = 100*time.Millisecond, 10, 1
	}))
	ctx := ctxT(t, 30*time.Minute)
	const window = 30 * time.Second
	measure := func(what string) (cores float64, entries uint64) {
		l := c.Leader()
		i0, cpu0, wall0 := l.Status().LastIndex, cpuTime(t), time.Now()
		time.Sleep(window) // the measurement is of the idle process over this window
		cpu, wall := cpuTime(t)-cpu0, time.Since(wall0)
		cores, entries = float64(cpu)/float64(wall), l.Status().LastIndex-i0
		t.Logf("%s: %.1f%% of a core, %d log entries in %v", what, 100*cores, entries, wall.Round(time.Second))
		return cores, entries
	}
	idle, _ := measure("no sessions")

	holder := (c.LeaderIndex() + 1) % 3
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range 64 {
		wg.Go(func() {
			for range next {
				for {
					s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(time.Hour))
					if err == nil {
						s.Orphan()
						break
					}
					// A loaded cell may change leader meanwhile: try again.
					require.NoError(t, ctx.Err())
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d sessions created and abandoned in %v (%d attempts failed and were retried)",
		n, time.Since(start).Round(time.Second), failed.Load())
	measure("abandoned, same leader")

	// A new leader loads them all as silent since its election: it marks
	// them (once), and writes the session clock each time its tenure
	// doubles (at 8, 16, 32, 64 s...).
	old := c.LeaderIndex()
	c.Crash(old)
	for c.LeaderIndex() == old {
	}
	elected := time.Now()
	measure("abandoned, new leader, its first 30 s")
	time.Sleep(time.Until(elected.Add(70 * time.Second))) // past its clock write at about 65 s
	cores, entries := measure("abandoned, new leader, from 70 s")
	t.Logf("abandoned sessions cost the idle cell %.1f%% of a core over its idle %.1f%%, and %d log entries",
		100*(cores-idle), 100*idle, entries)
}
