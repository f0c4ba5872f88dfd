package scenario

import (
	"math"
	"time"
)

// histogram records latencies in fixed memory, in buckets 1% wide from
// histMin up: a side that completes more operations must not hold more
// memory for its own measurement, since peak RSS is one of the figures.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histMin    = 10 * time.Nanosecond
	histGrowth = 1.01
	// 10 ns * 1.01^2400 is about 240 s, past any operation's timeout.
	histBuckets = 2400
)

var logGrowth = math.Log(histGrowth)

func bucketOf(d time.Duration) int {
	if d <= histMin {
		return 0
	}
	i := int(math.Log(float64(d)/float64(histMin))/logGrowth) + 1
	return min(i, histBuckets-1)
}

func (h *histogram) add(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the p-th percentile (0 < p <= 100) within 1%: the
// middle of the bucket holding the sample of that rank.
func (h *histogram) quantile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(max(1, int64(float64(h.n)*p/100+0.5)))
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			if i == 0 {
				return histMin
			}
			lo := float64(histMin) * math.Pow(histGrowth, float64(i-1))
			return time.Duration(lo * math.Sqrt(histGrowth))
		}
	}
	return time.Duration(float64(histMin) * math.Pow(histGrowth, histBuckets))
}
