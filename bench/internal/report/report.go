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

// Child is what one child process measured: one scenario on one side.
type Child struct {
	Side     string            `json:"side"`
	Scenario string            `json:"scenario"`
	Metrics  []scenario.Metric `json:"metrics"`
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

// Row is one figure with both sides.
type Row struct {
	Scenario string `json:"scenario"`
	Name     string `json:"name"`
	Label    string `json:"label"`
	Unit     string `json:"unit"`
	// Coord and Etcd are nil when that side did not measure the figure.
	Coord *float64 `json:"coord"`
	Etcd  *float64 `json:"etcd"`
	// Ratio is Coord/Etcd, nil unless both are there and Etcd is not 0.
	Ratio *float64 `json:"ratio"`
	// Target is issue 5's target for the figure ("" if none), and
	// Verdict "meets" or "misses".
	Target  string `json:"target,omitempty"`
	Verdict string `json:"verdict,omitempty"`
}

// Rows compares the children's figures, in the order of the scenarios
// given, adds each child's CPU and peak RSS, and the peak RSS of each
// side over its scenarios that have a counterpart on the other side
// (scenario 7).
func Rows(order []string, children []Child) []Row {
	var rows []Row
	find := func(side, sc string) *Child {
		for i := range children {
			if children[i].Side == side && children[i].Scenario == sc {
				return &children[i]
			}
		}
		return nil
	}
	peak := map[string]float64{}
	for _, sc := range order {
		coord, etcd := find("coord", sc), find("etcd", sc)
		if coord == nil && etcd == nil {
			continue
		}
		var names []string
		procs := 0 // member processes of a multi-process run
		labels := map[string]scenario.Metric{}
		vals := map[string]map[string]float64{"coord": {}, "etcd": {}}
		for _, ch := range []*Child{coord, etcd} {
			if ch == nil {
				continue
			}
			for _, m := range ch.Metrics {
				if _, ok := labels[m.Name]; !ok {
					names = append(names, m.Name)
					labels[m.Name] = m
				}
				vals[ch.Side][m.Name] = m.Value
			}
			vals[ch.Side][sc+".child_cpu"] = ch.CPUSeconds
			vals[ch.Side][sc+".child_rss"] = mb(ch.PeakRSS)
			for i, p := range ch.Processes {
				vals[ch.Side][fmt.Sprintf("%s.proc%d_cpu", sc, i)] = p.CPUSeconds
				vals[ch.Side][fmt.Sprintf("%s.proc%d_rss", sc, i)] = mb(p.PeakRSS)
			}
			if len(ch.Processes) > 0 {
				procs = max(procs, len(ch.Processes))
				continue
			}
			if coord != nil && etcd != nil {
				peak[ch.Side] = max(peak[ch.Side], mb(ch.PeakRSS))
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
			rows = append(rows, newRow(sc, n, labels[n], vals["coord"], vals["etcd"]))
		}
	}
	if len(peak) > 0 {
		rows = append(rows, newRow("rss", "rss.peak",
			scenario.Metric{Label: "peak RSS over the scenarios run on both sides", Unit: "MB"},
			map[string]float64{"rss.peak": peak["coord"]}, map[string]float64{"rss.peak": peak["etcd"]}))
		if _, ok := peak["coord"]; !ok {
			rows[len(rows)-1].Coord = nil
		}
		if _, ok := peak["etcd"]; !ok {
			rows[len(rows)-1].Etcd = nil
		}
		fixRatio(&rows[len(rows)-1])
	}
	for i := range rows {
		judge(&rows[i])
	}
	return rows
}

func newRow(sc, name string, m scenario.Metric, coord, etcd map[string]float64) Row {
	r := Row{Scenario: sc, Name: name, Label: m.Label, Unit: m.Unit}
	if v, ok := coord[name]; ok {
		r.Coord = &v
	}
	if v, ok := etcd[name]; ok {
		r.Etcd = &v
	}
	fixRatio(&r)
	return r
}

func fixRatio(r *Row) {
	r.Ratio = nil
	if r.Coord != nil && r.Etcd != nil && *r.Etcd != 0 {
		v := *r.Coord / *r.Etcd
		r.Ratio = &v
	}
}

func mb(b int64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }

// Verdicts returns the rows that carry a target, in order.
func Verdicts(rows []Row) []Row {
	return slices.DeleteFunc(slices.Clone(rows), func(r Row) bool { return r.Target == "" })
}
