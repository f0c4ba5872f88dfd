package report

import (
	"strings"
	"testing"
)

func spreadRow(sc, name string, med, lo, hi float64) Row {
	return Row{Scenario: sc, Name: name, Label: name, Ratio: f(med), RatioMin: f(lo), RatioMax: f(hi), Pairs: 3}
}

// The headline points are the ratio-target figures and every CPU per
// operation; two runs agree on one when their ranges meet, and a point
// missing from the second run never agrees.
func TestCompareRuns(t *testing.T) {
	a := []Row{
		spreadRow("put", "put.c64.rate", 1.0, 0.9, 1.1),              // ratio target: overlaps
		spreadRow("put@procs", "put.c64.cpu_us", 0.9, 0.84, 0.99),    // CPU: apart
		spreadRow("put", "put.c64.p50", 0.8, 0.7, 0.9),               // no target: not headline
		spreadRow("sessions-large", "sessions-large.cores", 1, 1, 1), // coord-only bound: not headline
		spreadRow("get", "get.linearizable.rate", 2, 1.8, 2.2),       // missing from b
		spreadRow("watch", "watch.all.p99", 0.2, 0.1, 0.3),           // touches at one end
	}
	b := []Row{
		spreadRow("put", "put.c64.rate", 1.2, 1.05, 1.3),
		spreadRow("put@procs", "put.c64.cpu_us", 0.7, 0.6, 0.8),
		spreadRow("watch", "watch.all.p99", 0.4, 0.3, 0.5),
	}
	pts := CompareRuns(a, b)
	want := map[string]bool{"put.c64.rate": true, "put.c64.cpu_us": false, "get.linearizable.rate": false, "watch.all.p99": true}
	if len(pts) != len(want) {
		t.Fatalf("points %+v, want %v", pts, want)
	}
	for _, p := range pts {
		if w, ok := want[p.Name]; !ok || p.Overlap != w {
			t.Errorf("%s: overlap %v, want %v (headline %v)", p.Name, p.Overlap, w, ok)
		}
	}
	var out strings.Builder
	WriteRunComparison(&out, pts)
	if !strings.Contains(out.String(), "2 of 4 headline points") {
		t.Errorf("summary missing:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "| get.linearizable.rate (get) | 2.00x | 1.80-2.20x | - | - | **no** |") {
		t.Errorf("missing point not shown as such:\n%s", out.String())
	}
}
