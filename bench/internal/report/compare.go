package report

import (
	"fmt"
	"io"
	"strings"
)

// Two full runs at different times tell the same story only where their
// paired ranges overlap: each range is how far that run's machine moved
// the ratio, so two ranges apart mean the figure depends on when it was
// measured. Issue 27 asks this of every headline point: a figure whose
// target bounds the ratio, and every CPU per operation.

// RunPoint is one headline point of two runs.
type RunPoint struct {
	Scenario, Name, Label string
	// A and B are the point's spread in each run; N 0 where that run has
	// no ratio for it.
	A, B Spread
	// Overlap is set when both runs have a range and the two meet.
	Overlap bool
}

// headline reports whether r is a headline point.
func headline(r Row) bool {
	if strings.HasSuffix(r.Name, ".cpu_us") {
		return true
	}
	t, ok := targetOf(r)
	return ok && t.ratio
}

// CompareRuns returns the headline points of run a, in its order, each
// beside the same figure of run b.
func CompareRuns(a, b []Row) []RunPoint {
	key := func(r Row) string { return r.Scenario + "/" + r.Name }
	byKey := make(map[string]Row, len(b))
	for _, r := range b {
		byKey[key(r)] = r
	}
	var pts []RunPoint
	for _, r := range a {
		if !headline(r) {
			continue
		}
		p := RunPoint{Scenario: r.Scenario, Name: r.Name, Label: r.Label, A: r.spread()}
		if o, ok := byKey[key(r)]; ok {
			p.B = o.spread()
		}
		p.Overlap = p.A.N > 0 && p.B.N > 0 && p.A.Min <= p.B.Max && p.B.Min <= p.A.Max
		pts = append(pts, p)
	}
	return pts
}

// WriteRunComparison prints pts as a Markdown table and the count of
// points whose ranges overlap.
func WriteRunComparison(w io.Writer, pts []RunPoint) {
	fmt.Fprintln(w, "| figure | run 1: coord/etcd | run 1: paired range | run 2: coord/etcd | run 2: paired range | ranges overlap |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|")
	agree := 0
	for _, p := range pts {
		mark := "**no**"
		if p.Overlap {
			mark = "yes"
			agree++
		}
		fmt.Fprintf(w, "| %s (%s) | %s | %s | %s | %s | %s |\n", p.Label, p.Scenario,
			spreadMedian(p.A), spreadSpan(p.A), spreadMedian(p.B), spreadSpan(p.B), mark)
	}
	fmt.Fprintf(w, "\n%d of %d headline points have overlapping ranges.\n", agree, len(pts))
}

func spreadMedian(s Spread) string {
	if s.N == 0 {
		return "-"
	}
	return ratio(&s.Median)
}

func spreadSpan(s Spread) string {
	if s.N == 0 {
		return "-"
	}
	return s.Range()
}
