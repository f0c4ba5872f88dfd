// Package hist is a latency histogram in fixed memory that can cross a
// process boundary: member processes record, the parent merges.
package hist

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Histogram records latencies in buckets 1% wide from Min up. Its size
// does not grow with the samples: a side that completes more operations
// must not hold more memory for its own measurement, since RSS is one of
// the figures. The zero value is empty and ready to use; it is not safe
// for concurrent use.
type Histogram struct {
	counts [Buckets]uint64
	n      uint64
	max    time.Duration
}

const (
	// Min is the lower bound of the first bucket.
	Min = 10 * time.Nanosecond
	// Growth is the ratio of one bucket's bounds.
	Growth = 1.01
	// Buckets is the number of buckets: 10 ns * 1.01^2400 is about
	// 240 s, past any operation's timeout.
	Buckets = 2400
)

var logGrowth = math.Log(Growth)

func bucketOf(d time.Duration) int {
	if d <= Min {
		return 0
	}
	i := int(math.Log(float64(d)/float64(Min))/logGrowth) + 1
	return min(i, Buckets-1)
}

// Add records one latency.
func (h *Histogram) Add(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.n++
	h.max = max(h.max, d)
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count returns the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest sample, exactly (0 when empty).
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the p-th percentile (0 < p <= 100) within 1%: the
// middle of the bucket holding the sample of that rank; 0 when empty.
func (h *Histogram) Quantile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(max(1, int64(float64(h.n)*p/100+0.5)))
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			if i == 0 {
				return Min
			}
			lo := float64(Min) * math.Pow(Growth, float64(i-1))
			return min(time.Duration(lo*math.Sqrt(Growth)), h.max)
		}
	}
	return h.max
}

// wire is a Histogram on the wire: the non-empty buckets only.
type wire struct {
	Buckets map[int]uint64 `json:"buckets,omitempty"`
	Max     time.Duration  `json:"max_ns"`
}

// MarshalJSON encodes the non-empty buckets.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	w := wire{Buckets: map[int]uint64{}, Max: h.max}
	for i, c := range h.counts {
		if c > 0 {
			w.Buckets[i] = c
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON wrote. It comes from another
// process, so every bucket index and the maximum are checked.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Max < 0 {
		return fmt.Errorf("hist: negative maximum %d", w.Max)
	}
	*h = Histogram{max: w.Max}
	for i, c := range w.Buckets {
		if i < 0 || i >= Buckets {
			return fmt.Errorf("hist: bucket %d out of range [0, %d)", i, Buckets)
		}
		if h.n+c < h.n {
			return fmt.Errorf("hist: count overflows")
		}
		h.counts[i] = c
		h.n += c
	}
	return nil
}
