package hist

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The percentiles agree with the exact ones within the 1% bucket width,
// the maximum is exact, and both survive a JSON round trip.
func TestQuantilesAndJSON(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	var h Histogram
	var all []time.Duration
	for range 50_000 {
		d := time.Duration(float64(time.Microsecond) * float64(int64(1)<<rng.IntN(20)) * (1 + rng.Float64()))
		h.Add(d)
		all = append(all, d)
	}
	slices.Sort(all)
	b, err := json.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	var back Histogram
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*Histogram{&h, &back} {
		for _, p := range []float64{1, 50, 99, 99.9, 100} {
			exact := all[max(0, int(float64(len(all))*p/100+0.5)-1)]
			if r := float64(g.Quantile(p)) / float64(exact); r < 0.99 || r > 1.01 {
				t.Errorf("seed %d: p%v = %v, exact %v", seed, p, g.Quantile(p), exact)
			}
		}
		if g.Max() != all[len(all)-1] || g.Count() != uint64(len(all)) {
			t.Errorf("seed %d: max %v count %d, want %v %d", seed, g.Max(), g.Count(), all[len(all)-1], len(all))
		}
	}
	var empty Histogram
	if empty.Quantile(99) != 0 || empty.Max() != 0 {
		t.Errorf("empty: p99 %v max %v", empty.Quantile(99), empty.Max())
	}
}

// Merging two halves gives the histogram of the whole.
func TestMerge(t *testing.T) {
	var a, b, whole Histogram
	for i := range 1000 {
		d := time.Duration(i+1) * time.Millisecond
		whole.Add(d)
		if i%2 == 0 {
			a.Add(d)
		} else {
			b.Add(d)
		}
	}
	a.Merge(&b)
	if a != whole {
		t.Errorf("merged p50 %v p99 %v max %v, whole %v %v %v",
			a.Quantile(50), a.Quantile(99), a.Max(), whole.Quantile(50), whole.Quantile(99), whole.Max())
	}
}

// A histogram from another process is checked: bucket indexes in range,
// no negative maximum, no overflowing count.
func TestUnmarshalRejects(t *testing.T) {
	for _, in := range []string{
		`{"buckets":{"2400":1},"max_ns":1}`,
		`{"buckets":{"-1":1},"max_ns":1}`,
		`{"buckets":{"1":1},"max_ns":-5}`,
		`{"buckets":{"1":18446744073709551615,"2":1},"max_ns":1}`,
		`[1,2]`,
	} {
		var h Histogram
		if err := json.Unmarshal([]byte(in), &h); err == nil {
			t.Errorf("%s accepted", in)
		}
	}
}
