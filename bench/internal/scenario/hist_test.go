package scenario

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The histogram's percentiles agree with the exact ones within its 1%
// bucket width, over latencies spread across six orders of magnitude.
func TestHistogramQuantilesWithinOnePercent(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	var h histogram
	var all []time.Duration
	for range 100_000 {
		d := time.Duration(float64(time.Microsecond) * float64(int64(1)<<rng.IntN(20)) * (1 + rng.Float64()))
		h.add(d)
		all = append(all, d)
	}
	sorted := sortedCopy(all)
	for _, p := range []float64{1, 50, 90, 99, 99.9, 100} {
		exact, got := percentile(sorted, p), h.quantile(p)
		if ratio := float64(got) / float64(exact); ratio < 0.99 || ratio > 1.01 {
			t.Errorf("seed %d: p%v = %v, exact %v (ratio %.4f)", seed, p, got, exact, ratio)
		}
	}
	var empty histogram
	if empty.quantile(99) != 0 {
		t.Errorf("empty histogram: p99 = %v", empty.quantile(99))
	}
}
