package report

import (
	"math"
	"strings"
	"testing"

	"github.com/coordcell/coord/bench/internal/scenario"
)

func f(v float64) *float64 { return &v }

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5}, // the mean of the two middle values
		{[]float64{2, 2, 9, 1, 2}, 2},
	} {
		in := append([]float64(nil), c.in...)
		got, ok := Median(c.in)
		if !ok || got != c.want {
			t.Errorf("Median(%v) = %v, %v; want %v", in, got, ok, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("Median reordered its input: %v, was %v", c.in, in)
			}
		}
	}
	if _, ok := Median(nil); ok {
		t.Error("Median of nothing is ok")
	}
}

// Ratios pair round i of coord with round i of etcd, and skip a round
// that either side lacks or where etcd measured 0.
func TestPairedRatios(t *testing.T) {
	coord := []*float64{f(10), f(20), nil, f(30), f(8)}
	etcd := []*float64{f(5), f(40), f(7), f(0), f(4)}
	got := PairedRatios(coord, etcd)
	want := []float64{2, 0.5, 2}
	if len(got) != len(want) {
		t.Fatalf("PairedRatios = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("PairedRatios = %v, want %v", got, want)
		}
	}
	// A negative value has no meaningful ratio (a difference of two
	// figures, say); coord's 0 over a positive etcd value is 0x.
	if got := PairedRatios([]*float64{f(-1), f(2), f(0)}, []*float64{f(4), f(-2), f(5)}); len(got) != 1 || got[0] != 0 {
		t.Errorf("signs: %v", got)
	}
	// A shorter side pairs only the rounds both have.
	if got := PairedRatios([]*float64{f(1), f(2), f(3)}, []*float64{f(1)}); len(got) != 1 || got[0] != 1 {
		t.Errorf("uneven sides: %v", got)
	}
}

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		ratios           []float64
		med, lo, hi      float64
		level            bool
		describe, reason string
	}{
		{[]float64{1.2, 1.1, 1.4}, 1.2, 1.1, 1.4, false, "1.10-1.40x", "all above 1"},
		{[]float64{0.4, 0.45, 0.3}, 0.4, 0.3, 0.45, false, "0.300-0.450x", "all below 1"},
		{[]float64{0.9, 1.3, 1.05}, 1.05, 0.9, 1.3, true, "0.900-1.30x", "crosses 1"},
		{[]float64{1, 1.2, 1.1}, 1.1, 1, 1.2, true, "1.00-1.20x", "touches 1: not apart from it"},
		{[]float64{0.8, 1.5}, 1.15, 0.8, 1.5, true, "0.800-1.50x", "even count"},
	} {
		s, ok := SpreadOf(c.ratios)
		if !ok || math.Abs(s.Median-c.med) > 1e-9 || s.Min != c.lo || s.Max != c.hi || s.N != len(c.ratios) || s.Level() != c.level {
			t.Errorf("%s: SpreadOf(%v) = %+v level %v", c.reason, c.ratios, s, s.Level())
		}
		if got := s.Range(); got != c.describe {
			t.Errorf("%s: Range() = %q, want %q", c.reason, got, c.describe)
		}
	}
	// One round has no range: it is never level, whatever its ratio.
	if s, _ := SpreadOf([]float64{1}); s.Level() || s.Range() != "1 round" {
		t.Errorf("one round: %+v level %v range %q", s, s.Level(), s.Range())
	}
	if _, ok := SpreadOf(nil); ok {
		t.Error("the spread of nothing is ok")
	}
}

// interleaved is three rounds of the put scenario on both sides.
func interleaved() []Child {
	m := func(name string, v float64) scenario.Metric {
		return scenario.Metric{Name: name, Label: name, Unit: "u", Value: v}
	}
	var out []Child
	// coord's rate: 900, 1000, 1300; etcd's: 1000, 400, 1000. Ratios
	// 0.9, 2.5, 1.3: median 1.3 (the medians' ratio would be 1.0).
	coord := []float64{900, 1000, 1300}
	etcd := []float64{1000, 400, 1000}
	for r := range 3 {
		out = append(out,
			Child{Side: "coord", Scenario: "put", Round: r + 1, Metrics: []scenario.Metric{m("put.c64.rate", coord[r]), m("put.c16.p99", 2)},
				CPUSeconds: float64(r + 1), PeakRSS: int64(50+r) << 20},
			Child{Side: "etcd", Scenario: "put", Round: r + 1, Metrics: []scenario.Metric{m("put.c64.rate", etcd[r]), m("put.c16.p99", 8)},
				CPUSeconds: 6, PeakRSS: 200 << 20})
	}
	// A coord-only scenario, run in each round too.
	for r := range 3 {
		out = append(out, Child{Side: "coord", Scenario: "sessions-large", Round: r + 1,
			Metrics: []scenario.Metric{m("sessions-large.log_entries", float64(r))}, PeakRSS: 900 << 20})
	}
	return out
}

func TestRowsRounds(t *testing.T) {
	rows := Rows([]string{"put", "sessions-large"}, interleaved())
	r := row(t, rows, "put.c64.rate")
	if *r.Coord != 1000 || *r.Etcd != 1000 {
		t.Errorf("medians: coord %v etcd %v, want 1000 and 1000", *r.Coord, *r.Etcd)
	}
	if *r.Ratio != 1.3 || *r.RatioMin != 0.9 || *r.RatioMax != 2.5 || r.Pairs != 3 || !r.Level {
		t.Errorf("paired ratios: median %v range %v..%v over %d, level %v; want 1.3, 0.9..2.5 over 3, level",
			*r.Ratio, *r.RatioMin, *r.RatioMax, r.Pairs, r.Level)
	}
	if len(r.CoordRounds) != 3 || *r.CoordRounds[2] != 1300 || *r.EtcdRounds[1] != 400 {
		t.Errorf("per-round values: %v %v", r.CoordRounds, r.EtcdRounds)
	}
	// The verdict is on the median of the paired ratios.
	if r.Verdict != "MISSES" || r.Target != ">= 3.0x" {
		t.Errorf("verdict %s %s", r.Verdict, r.Target)
	}
	if r := row(t, rows, "put.c16.p99"); *r.Ratio != 0.25 || r.Level || r.Verdict != "meets" {
		t.Errorf("put.c16.p99: %+v", r)
	}
	// Each round's child CPU, and the peak RSS per round over the
	// scenarios both sides ran.
	if r := row(t, rows, "put.child_cpu"); *r.Coord != 2 || *r.Ratio != 2.0/6 || *r.RatioMin != 1.0/6 || *r.RatioMax != 0.5 {
		t.Errorf("child CPU row: %+v", r)
	}
	if r := row(t, rows, "rss.peak"); *r.Coord != 51 || *r.Etcd != 200 || r.Pairs != 3 {
		t.Errorf("rss.peak: %+v", r)
	}
	r = row(t, rows, "sessions-large.log_entries")
	if *r.Coord != 1 || r.Etcd != nil || r.Ratio != nil || r.Pairs != 0 || r.Level {
		t.Errorf("sessions-large.log_entries: %+v", r)
	}
}

func TestWriteTableRounds(t *testing.T) {
	rows := Rows([]string{"put"}, interleaved())
	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"paired range", "1.30x", "0.900-2.50x", "LEVEL", "3 rounds"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	WriteMarkdown(&b, rows)
	if !strings.HasPrefix(b.String(), "| figure | unit | coord (median) | etcd (median) | coord/etcd (median of paired ratios) | paired range | level | target |") ||
		!strings.Contains(b.String(), "| 0.900-2.50x | **level** |") {
		t.Errorf("markdown:\n%s", b.String())
	}
}

// Issue 23's target bounds coord's own figure: the in-flight p99 past the
// first write after the stop, in ms.
func TestInflightTarget(t *testing.T) {
	over := func(name string, coord, etcd float64) Child {
		return Child{Side: name, Scenario: "inflight", Metrics: []scenario.Metric{
			{Name: "inflight.crash.over", Label: "over", Unit: "ms", Value: coord},
			{Name: "inflight.graceful.over", Label: "over", Unit: "ms", Value: etcd}}}
	}
	rows := Rows([]string{"inflight"}, []Child{over("coord", 20, 51), over("etcd", 5000, 1)})
	if r := row(t, rows, "inflight.crash.over"); r.Verdict != "meets" || r.Target != "coord <= 50" {
		t.Errorf("crash: %s %s", r.Verdict, r.Target)
	}
	if r := row(t, rows, "inflight.graceful.over"); r.Verdict != "MISSES" {
		t.Errorf("graceful: %s %s", r.Verdict, r.Target)
	}
}

// A figure marked OmitZero (an error class, say) has no row when it is 0
// in every round of both sides; otherwise it has its row, zeros and all.
func TestOmitZero(t *testing.T) {
	m := func(name string, v float64) scenario.Metric {
		return scenario.Metric{Name: name, Label: name, Unit: "writes", Value: v, OmitZero: true}
	}
	var chs []Child
	for r := range 3 {
		other := 0.0
		if r == 1 {
			other = 2
		}
		chs = append(chs,
			Child{Side: "coord", Scenario: "inflight", Round: r + 1, Metrics: []scenario.Metric{m("x.none", 0), m("x.some", 0)}},
			Child{Side: "etcd", Scenario: "inflight", Round: r + 1, Metrics: []scenario.Metric{m("x.none", 0), m("x.some", other)}})
	}
	rows := Rows([]string{"inflight"}, chs)
	for _, r := range rows {
		if r.Name == "x.none" {
			t.Errorf("a row for a figure 0 everywhere: %+v", r)
		}
	}
	if r := row(t, rows, "x.some"); *r.Coord != 0 || *r.Etcd != 0 || len(r.EtcdRounds) != 3 || *r.EtcdRounds[1] != 2 {
		t.Errorf("x.some: %+v", r)
	}
}
