// Package report turns the children's results into the comparison: one
// row per figure with both sides and the ratio coord/etcd, checked
// against issue 5's targets, printed as a table and written as JSON.
package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/coordcell/coord/bench/internal/scenario"
)

// Child is what one child process measured: one scenario on one side,
// in one round.
type Child struct {
	Side     string `json:"side"`
	Scenario string `json:"scenario"`
	// Round is the child's round, from 1, among the interleaved rounds of
	// its scenario (0 in files from before rounds: one round).
	Round   int               `json:"round,omitempty"`
	Metrics []scenario.Metric `json:"metrics"`
	// Error is why the scenario failed; "" when it ran to the end.
	Error string `json:"error,omitempty"`
	// WallSeconds is the child's run time, start to exit.
	WallSeconds float64 `json:"wall_seconds"`
	// CPUSeconds and PeakRSS come from the child's rusage, read by the
	// parent after it exited (so they are that process's own).
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSS    int64   `json:"peak_rss_bytes"`
	// VmHWM is the peak RSS the child read from /proc/self/status just
	// before it reported; it should match PeakRSS.
	VmHWM int64 `json:"vmhwm_bytes"`
	// Processes is set when the scenario ran one member per process
	// (-shape procs): each member process's CPU time and peak RSS, by
	// member. CPUSeconds and PeakRSS are then their sums.
	Processes []Process `json:"processes,omitempty"`
}

// Process is what one member process of a multi-process run used, from
// its rusage.
type Process struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSS    int64   `json:"peak_rss_bytes"`
}

// Row is one figure with both sides, over the rounds.
type Row struct {
	Scenario string `json:"scenario"`
	Name     string `json:"name"`
	Label    string `json:"label"`
	Unit     string `json:"unit"`
	// Coord and Etcd are each side's median over its rounds, nil when
	// that side did not measure the figure.
	Coord *float64 `json:"coord"`
	Etcd  *float64 `json:"etcd"`
	// CoordRounds and EtcdRounds are the values by round (index 0 is the
	// first round; null where the side lacks that round).
	CoordRounds []*float64 `json:"coord_rounds,omitempty"`
	EtcdRounds  []*float64 `json:"etcd_rounds,omitempty"`
	// Ratio is the median of the paired ratios (round i of coord over
	// round i of etcd), nil unless some round has both sides and a
	// non-zero etcd value; RatioMin and RatioMax are their range, Pairs
	// how many there are.
	Ratio    *float64 `json:"ratio"`
	RatioMin *float64 `json:"ratio_min,omitempty"`
	RatioMax *float64 `json:"ratio_max,omitempty"`
	Pairs    int      `json:"pairs,omitempty"`
	// Level is set when the paired ratios' range crosses 1.0x (Spread.Level).
	Level bool `json:"level,omitempty"`
	// Target is issue 5's target for the figure ("" if none), and
	// Verdict "meets" or "misses", judged on the medians.
	Target  string `json:"target,omitempty"`
	Verdict string `json:"verdict,omitempty"`
}

// sideRounds holds one side's values of every figure of a scenario, by
// round index.
type sideRounds map[string][]*float64

func (s sideRounds) set(name string, round, rounds int, v float64) {
	if s[name] == nil {
		s[name] = make([]*float64, rounds)
	}
	s[name][round] = &v
}

// Rows compares the children's figures, in the order of the scenarios
// given, adds each child's CPU and peak RSS, and the peak RSS of each
// side over its scenarios that have a counterpart on the other side
// (scenario 7), each by round.
func Rows(order []string, children []Child) []Row {
	var rows []Row
	// Round numbers become indexes 0..n-1 in their order, over every
	// child, so the rounds of different scenarios line up.
	var roundNums []int
	for _, ch := range children {
		if !slices.Contains(roundNums, ch.Round) {
			roundNums = append(roundNums, ch.Round)
		}
	}
	slices.Sort(roundNums)
	rounds := max(1, len(roundNums))
	index := func(ch *Child) int { return slices.Index(roundNums, ch.Round) }
	has := func(side, sc string) bool {
		return slices.ContainsFunc(children, func(ch Child) bool { return ch.Side == side && ch.Scenario == sc })
	}
	peak := map[string]sideRounds{"coord": {}, "etcd": {}}
	for _, sc := range order {
		coord, etcd := has("coord", sc), has("etcd", sc)
		if !coord && !etcd {
			continue
		}
		var names []string
		procs := 0 // member processes of a multi-process run
		labels := map[string]scenario.Metric{}
		vals := map[string]sideRounds{"coord": {}, "etcd": {}}
		for i := range children {
			ch := &children[i]
			if ch.Scenario != sc || vals[ch.Side] == nil {
				continue
			}
			r := index(ch)
			for _, m := range ch.Metrics {
				if _, ok := labels[m.Name]; !ok {
					names = append(names, m.Name)
					labels[m.Name] = m
				}
				vals[ch.Side].set(m.Name, r, rounds, m.Value)
			}
			vals[ch.Side].set(sc+".child_cpu", r, rounds, ch.CPUSeconds)
			vals[ch.Side].set(sc+".child_rss", r, rounds, mb(ch.PeakRSS))
			for i, p := range ch.Processes {
				vals[ch.Side].set(fmt.Sprintf("%s.proc%d_cpu", sc, i), r, rounds, p.CPUSeconds)
				vals[ch.Side].set(fmt.Sprintf("%s.proc%d_rss", sc, i), r, rounds, mb(p.PeakRSS))
			}
			if len(ch.Processes) > 0 {
				procs = max(procs, len(ch.Processes))
				continue
			}
			if coord && etcd {
				if p := peak[ch.Side]["rss.peak"]; p == nil || p[r] == nil || *p[r] < mb(ch.PeakRSS) {
					peak[ch.Side].set("rss.peak", r, rounds, mb(ch.PeakRSS))
				}
			}
		}
		if procs == 0 {
			labels[sc+".child_cpu"] = scenario.Metric{Label: sc + " process: CPU time", Unit: "s"}
			labels[sc+".child_rss"] = scenario.Metric{Label: sc + " process: peak RSS", Unit: "MB"}
			names = append(names, sc+".child_cpu", sc+".child_rss")
		}
		for i := range procs {
			cpu, rss := fmt.Sprintf("%s.proc%d_cpu", sc, i), fmt.Sprintf("%s.proc%d_rss", sc, i)
			labels[cpu] = scenario.Metric{Label: fmt.Sprintf("%s member process %d: CPU time", sc, i), Unit: "s"}
			labels[rss] = scenario.Metric{Label: fmt.Sprintf("%s member process %d: peak RSS", sc, i), Unit: "MB"}
			names = append(names, cpu, rss)
		}
		if procs > 0 {
			labels[sc+".child_cpu"] = scenario.Metric{Label: sc + " member processes: CPU time, sum", Unit: "s"}
			labels[sc+".child_rss"] = scenario.Metric{Label: sc + " member processes: peak RSS, sum", Unit: "MB"}
			names = append(names, sc+".child_cpu", sc+".child_rss")
		}
		for _, n := range names {
			if labels[n].OmitZero && allZero(vals["coord"][n]) && allZero(vals["etcd"][n]) {
				continue
			}
			rows = append(rows, newRow(sc, n, labels[n], vals["coord"][n], vals["etcd"][n]))
		}
	}
	if p := peak["coord"]["rss.peak"]; p != nil || peak["etcd"]["rss.peak"] != nil {
		rows = append(rows, newRow("rss", "rss.peak",
			scenario.Metric{Label: "peak RSS over the scenarios run on both sides", Unit: "MB"},
			p, peak["etcd"]["rss.peak"]))
	}
	for i := range rows {
		judge(&rows[i])
	}
	return rows
}

// newRow makes the row of one figure from each side's values by round.
func newRow(sc, name string, m scenario.Metric, coord, etcd []*float64) Row {
	r := Row{Scenario: sc, Name: name, Label: m.Label, Unit: m.Unit, CoordRounds: coord, EtcdRounds: etcd}
	if v, ok := Median(values(coord)); ok {
		r.Coord = &v
	}
	if v, ok := Median(values(etcd)); ok {
		r.Etcd = &v
	}
	if s, ok := SpreadOf(PairedRatios(coord, etcd)); ok {
		r.Ratio, r.RatioMin, r.RatioMax = &s.Median, &s.Min, &s.Max
		r.Pairs, r.Level = s.N, s.Level()
	}
	return r
}

// spread returns r's paired-ratio spread (N 0 when it has none).
func (r Row) spread() Spread {
	if r.Ratio == nil {
		return Spread{}
	}
	return Spread{Median: *r.Ratio, Min: *r.RatioMin, Max: *r.RatioMax, N: r.Pairs}
}

func mb(b int64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }

// Verdicts returns the rows that carry a target, in order.
func Verdicts(rows []Row) []Row {
	return slices.DeleteFunc(slices.Clone(rows), func(r Row) bool { return r.Target == "" })
}
