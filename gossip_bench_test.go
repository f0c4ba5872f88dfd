package coord_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coordcell/coord/coordtest"
)

// BenchmarkGossipColdStart starts 5 in-memory members that know nothing
// but gossip seeds (BootstrapExpect 3, coordtest's gossip timings), ten
// times, and times each from the first Open to the first write the cell
// accepts; it logs the median and the max (shown with -v). Run it once:
// go test -run '^$' -bench BenchmarkGossipColdStart -benchtime=1x -v . (with
// -count 10 it does 10 sets of 10).
func BenchmarkGossipColdStart(b *testing.B) {
	const runs = 10
	var took []time.Duration
	for run := range runs {
		b.Run(fmt.Sprint(run), func(b *testing.B) {
			for b.Loop() {
				start := time.Now()
				c := coordtest.NewCluster(b, 5, coordtest.WithGossip(), coordtest.WithWaitTimeout(30*time.Second))
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, err := c.Leader().Put(ctx, "k", []byte("v"))
					cancel()
					if err == nil {
						break
					}
					if time.Since(start) > time.Minute {
						b.Fatalf("no write accepted in a minute: %v", err)
					}
				}
				d := time.Since(start)
				took = append(took, d)
				b.ReportMetric(float64(d.Milliseconds()), "ms-to-first-write")
			}
		})
	}
	if len(took) > 0 {
		slices.Sort(took)
		b.Logf("cold start to first write over %d runs: median %v, max %v", len(took), took[len(took)/2], took[len(took)-1])
	}
}
