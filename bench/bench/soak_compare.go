package main

import (
	"fmt"
	"io"
	"time"
)

// The write latency budget a soak's every interval is held to (issue 27):
// put p99 and the slowest put.
const (
	soakPutP99Budget = 25 * time.Millisecond
	soakPutMaxBudget = 100 * time.Millisecond
)

// soakCompare is coord's put latency beside etcd's, interval by interval,
// in a soak where both cells ran at the same time on the same machine.
type soakCompare struct {
	Intervals []soakCompareLine `json:"intervals"`
	// Pairs counts the intervals both sides reported; CoordP99AtOrBelow
	// those where coord's put p99 was at or below etcd's; CoordInBudget
	// those where coord's p99 and max were within the budget, and
	// EtcdInBudget the same of etcd's.
	Pairs             int `json:"pairs"`
	CoordP99AtOrBelow int `json:"coord_p99_at_or_below_etcd"`
	CoordInBudget     int `json:"coord_in_budget"`
	EtcdInBudget      int `json:"etcd_in_budget"`
}

// soakCompareLine is one interval of both sides.
type soakCompareLine struct {
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	CoordP99Ms     float64 `json:"coord_put_p99_ms"`
	CoordMaxMs     float64 `json:"coord_put_max_ms"`
	EtcdP99Ms      float64 `json:"etcd_put_p99_ms"`
	EtcdMaxMs      float64 `json:"etcd_put_max_ms"`
}

// compareSides pairs coord's intervals with etcd's by their order (the
// sides' loops start together and tick at the same interval), or returns
// nil unless both ran.
func compareSides(sides []*soakSide) *soakCompare {
	var coord, etcd *soakSide
	for _, sd := range sides {
		switch sd.Side {
		case "coord":
			coord = sd
		case "etcd":
			etcd = sd
		}
	}
	if coord == nil || etcd == nil {
		return nil
	}
	inBudget := func(p99, maxMs float64) bool {
		return p99 <= ms(soakPutP99Budget) && maxMs <= ms(soakPutMaxBudget)
	}
	cmp := &soakCompare{}
	for i := range min(len(coord.Intervals), len(etcd.Intervals)) {
		c, e := coord.Intervals[i], etcd.Intervals[i]
		line := soakCompareLine{ElapsedSeconds: c.ElapsedSeconds,
			CoordP99Ms: c.PutP99Ms, CoordMaxMs: c.PutMaxMs, EtcdP99Ms: e.PutP99Ms, EtcdMaxMs: e.PutMaxMs}
		cmp.Intervals = append(cmp.Intervals, line)
		cmp.Pairs++
		if c.PutP99Ms <= e.PutP99Ms {
			cmp.CoordP99AtOrBelow++
		}
		if inBudget(c.PutP99Ms, c.PutMaxMs) {
			cmp.CoordInBudget++
		}
		if inBudget(e.PutP99Ms, e.PutMaxMs) {
			cmp.EtcdInBudget++
		}
	}
	return cmp
}

func printCompare(w io.Writer, c *soakCompare) {
	fmt.Fprintf(w, "soak: put latency by interval, both cells at the same time (budget: p99 <= %v, max <= %v)\n",
		soakPutP99Budget, soakPutMaxBudget)
	fmt.Fprintln(w, "  elapsed | coord p99/max ms | etcd p99/max ms | coord/etcd p99")
	for _, l := range c.Intervals {
		ratio := "-"
		if l.EtcdP99Ms > 0 {
			ratio = fmt.Sprintf("%.2fx", l.CoordP99Ms/l.EtcdP99Ms)
		}
		fmt.Fprintf(w, "  %7s | %6.1f / %6.1f | %6.1f / %6.1f | %s\n",
			(time.Duration(l.ElapsedSeconds) * time.Second).String(), l.CoordP99Ms, l.CoordMaxMs, l.EtcdP99Ms, l.EtcdMaxMs, ratio)
	}
	fmt.Fprintf(w, "  of %d intervals: coord's p99 at or below etcd's in %d; within the budget: coord %d, etcd %d\n",
		c.Pairs, c.CoordP99AtOrBelow, c.CoordInBudget, c.EtcdInBudget)
}
