package report

import "fmt"

// target is one of issue 5's targets: a bound on the ratio coord/etcd,
// or (etcd having no counterpart) on coord's own figure.
type target struct {
	// ratio: bound the ratio; otherwise bound coord's value.
	ratio   bool
	atLeast bool    // ">=" rather than "<="
	bound   float64 // the bound
	strict  bool    // "<" rather than "<="
}

// targets are issue 5's (and later issues'), keyed by figure name, or by
// scenario/name for a target of one scenario's row alone.
var targets = map[string]target{
	"put.c64.rate":          {ratio: true, atLeast: true, bound: 3.0},
	"put.c16.p99":           {ratio: true, bound: 0.5},
	"lock.contended.rate":   {ratio: true, atLeast: true, bound: 5.0},
	"lock.uncontended.rate": {ratio: true, atLeast: true, bound: 2.0},
	"get.linearizable.rate": {ratio: true, atLeast: true, bound: 2.0},
	"failover.write.p50":    {ratio: true, bound: 1.0},
	"watch.all.p99":         {ratio: true, bound: 1.0},
	// Issue 23: a write in flight across a leader change ends within
	// scenario.InflightOver (50 ms) of the first write after the stop.
	"inflight.crash.over":        {bound: 50},
	"inflight.graceful.over":     {bound: 50},
	"rss.peak":                   {ratio: true, bound: 0.5},
	"sessions-large.not_created": {bound: 0},
	"sessions-large.expired":     {bound: 0},
	"sessions-large.log_entries": {bound: 0},
	// The process runs all three members, so under one core for the
	// process means under one core for the leader.
	"sessions-large.cores": {bound: 1, strict: true},
	// Issue 27: CPU per operation with one member per process (keyed by
	// scenario/name: the one-process rows have no target), and the scale
	// run's targets on coord's own figures.
	"put@procs/put.c64.cpu_us":          {ratio: true, bound: 0.6},
	"get@procs/get.linearizable.cpu_us": {ratio: true, bound: 0.5},
	"scale.loaded.rss_ratio.max":        {bound: 2},
	"scale.memlimit.rss_ratio.max":      {bound: 1.3},
	"scale.restart.serving":             {bound: 10},
	"scale.join.mbps":                   {atLeast: true, bound: 100},
	"scale.put.p99_loaded_over_empty":   {bound: 1.5},
	"scale.put.p99_settled_over_empty":  {bound: 1.5},
}

func (t target) String() string {
	op := "<="
	switch {
	case t.atLeast:
		op = ">="
	case t.strict:
		op = "<"
	}
	if t.ratio {
		return fmt.Sprintf("%s %.1fx", op, t.bound)
	}
	return fmt.Sprintf("coord %s %g", op, t.bound)
}

// targetOf returns r's target: its scenario's own, else its figure's.
func targetOf(r Row) (target, bool) {
	if t, ok := targets[r.Scenario+"/"+r.Name]; ok {
		return t, true
	}
	t, ok := targets[r.Name]
	return t, ok
}

// judge sets r's target and verdict when it has one.
func judge(r *Row) {
	t, ok := targetOf(*r)
	if !ok {
		return
	}
	v := r.Coord
	if t.ratio {
		v = r.Ratio
	}
	r.Target = t.String()
	switch {
	case v == nil:
		r.Verdict = "n/a"
	case t.atLeast && *v >= t.bound, !t.atLeast && t.strict && *v < t.bound,
		!t.atLeast && !t.strict && *v <= t.bound:
		r.Verdict = "meets"
	default:
		r.Verdict = "MISSES"
	}
}
