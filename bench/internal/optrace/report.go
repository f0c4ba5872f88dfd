package optrace

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Thresholds of the report: a Raft loop that waited longer than
// slowLoopWait for a CPU, or a raft-log fsync longer than slowSync, marks
// the calls it overlaps.
const (
	slowLoopWait = 2 * time.Millisecond
	slowSync     = 2 * time.Millisecond
	bucket       = time.Millisecond // resolution of the overlap checks
	maxEpisodes  = 10
)

// timeline marks, per millisecond of the trace, what happened in it.
type timeline struct {
	gc, pebble, loopWait, logSync []bool
}

func (r *Report) timeline() timeline {
	end := time.Duration(0)
	for _, o := range r.Ops {
		end = max(end, o.End)
	}
	n := int(end/bucket) + 1
	t := timeline{make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)}
	mark := func(b []bool, s span) {
		for i := int(s.from / bucket); i <= int(s.to/bucket) && i < n; i++ {
			b[i] = true
		}
	}
	for _, s := range r.gc {
		mark(t.gc, s)
	}
	for _, s := range r.runs {
		if s.kind == "pebble flush/compaction" {
			mark(t.pebble, s)
		}
	}
	for _, s := range r.loopWaits {
		if s.to-s.from > slowLoopWait {
			mark(t.loopWait, s)
		}
	}
	for _, s := range r.syncs {
		if strings.HasPrefix(s.kind, "raft log") && s.to-s.from > slowSync {
			mark(t.logSync, s)
		}
	}
	return t
}

func (t timeline) any(b []bool, o Op) bool {
	for i := int(o.Start / bucket); i <= int(o.End/bucket) && i < len(b); i++ {
		if b[i] {
			return true
		}
	}
	return false
}

// Write writes the report as text.
func (r *Report) Write(w io.Writer) {
	n := len(r.Ops)
	if n == 0 {
		fmt.Fprintln(w, `no operations: the trace has no region "op" (was it written by the bench's -trace?)`)
		return
	}
	q := func(p float64) time.Duration { return r.Ops[min(n-1, int(p*float64(n)))].Dur() }
	fmt.Fprintf(w, "%d calls: p50 %v, p90 %v, p99 %v, p99.9 %v, max %v\n\n", n,
		ms(q(0.5)), ms(q(0.9)), ms(q(0.99)), ms(q(0.999)), ms(r.Ops[n-1].Dur()))

	t := r.timeline()
	fmt.Fprintf(w, "%-9s %6s %9s | %9s %9s %9s | %s\n", "band", "calls", "mean", "running", "runnable", "blocked",
		"share of the calls overlapping: GC, pebble flush/compaction running, a raft loop waiting > 2ms for a CPU, a raft-log fsync > 2ms")
	for _, b := range []struct {
		name     string
		from, to float64
	}{{"p0-50", 0, 0.5}, {"p50-90", 0.5, 0.9}, {"p90-99", 0.9, 0.99}, {"p99-100", 0.99, 1}} {
		ops := r.Ops[int(b.from*float64(n)):int(b.to*float64(n))]
		if len(ops) == 0 {
			continue
		}
		var sum Op
		var total time.Duration
		var gc, pebble, loop, sync int
		for _, o := range ops {
			total += o.Dur()
			sum.Running += o.Running + o.Syscall
			sum.Runnable += o.Runnable
			sum.Blocked += o.Blocked
			gc += b2i(t.any(t.gc, o))
			pebble += b2i(t.any(t.pebble, o))
			loop += b2i(t.any(t.loopWait, o))
			sync += b2i(t.any(t.logSync, o))
		}
		k := time.Duration(len(ops))
		pc := func(x int) string { return fmt.Sprintf("%3.0f%%", 100*float64(x)/float64(len(ops))) }
		fmt.Fprintf(w, "%-9s %6d %9v | %9v %9v %9v | %s %s %s %s\n", b.name, len(ops), ms(total/k),
			ms(sum.Running/k), ms(sum.Runnable/k), ms(sum.Blocked/k), pc(gc), pc(pebble), pc(loop), pc(sync))
	}

	fmt.Fprintln(w)
	for _, k := range slices.Sorted(maps.Keys(r.Fsyncs)) {
		fmt.Fprintf(w, "fsyncs, %s: %s\n", k, dist(r.Fsyncs[k]))
	}
	fmt.Fprintf(w, "raft loops' waits for a CPU: %s\n", dist(r.LoopWaits))
	fmt.Fprintf(w, "GC: %v in mark phases, %v stopped\n", ms(r.GCMark), ms(r.GCStop))

	eps := r.episodes()
	fmt.Fprintf(w, "\nthe slowest 1%% of the calls fall into %d episodes (overlapping calls); the %d largest:\n", len(eps), min(len(eps), maxEpisodes))
	for _, e := range eps[:min(len(eps), maxEpisodes)] {
		fmt.Fprintf(w, "  +%v to +%v: %d calls; CPU used in it: %s\n", ms(e.from), ms(e.to), e.calls, e.cpu)
		if e.detail != "" {
			fmt.Fprintf(w, "    %s\n", e.detail)
		}
	}
}

type episode struct {
	from, to    time.Duration
	calls       int
	cpu, detail string
}

// episodes groups the slowest 1% of the calls into runs of overlapping
// calls, largest first, and says what ran in each.
func (r *Report) episodes() []episode {
	slow := slices.Clone(r.Ops[len(r.Ops)*99/100:])
	slices.SortFunc(slow, func(a, b Op) int { return cmp.Compare(a.Start, b.Start) })
	var eps []episode
	for _, o := range slow {
		if l := len(eps) - 1; l >= 0 && o.Start <= eps[l].to {
			eps[l].to = max(eps[l].to, o.End)
			eps[l].calls++
			continue
		}
		eps = append(eps, episode{from: o.Start, to: o.End, calls: 1})
	}
	slices.SortStableFunc(eps, func(a, b episode) int { return cmp.Compare(b.calls, a.calls) })
	runs := slices.Clone(r.runs)
	slices.SortFunc(runs, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	for i := range eps[:min(len(eps), maxEpisodes)] {
		e := &eps[i]
		cpu := map[string]time.Duration{}
		first, _ := slices.BinarySearchFunc(runs, e.from-100*time.Millisecond, func(s span, t time.Duration) int { return cmp.Compare(s.from, t) })
		for _, s := range runs[first:] {
			if s.from >= e.to {
				break
			}
			if s.to > e.from {
				kind := cmp.Or(s.kind, "other")
				cpu[kind] += min(s.to, e.to) - max(s.from, e.from)
			}
		}
		var parts []string
		for _, k := range slices.SortedFunc(maps.Keys(cpu), func(a, b string) int { return cmp.Compare(cpu[b], cpu[a]) }) {
			if cpu[k] >= time.Millisecond {
				parts = append(parts, fmt.Sprintf("%s %v", k, ms(cpu[k])))
			}
		}
		e.cpu = strings.Join(parts, ", ")
		var detail []string
		var loopMax time.Duration
		for _, s := range r.loopWaits {
			if s.from < e.to && s.to > e.from {
				loopMax = max(loopMax, s.to-s.from)
			}
		}
		detail = append(detail, fmt.Sprintf("longest raft-loop wait for a CPU %v", ms(loopMax)))
		syncMax := map[string]time.Duration{}
		for _, s := range r.syncs {
			if s.from < e.to && s.to > e.from {
				syncMax[s.kind] = max(syncMax[s.kind], s.to-s.from)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(syncMax)) {
			detail = append(detail, fmt.Sprintf("longest %s fsync %v", k, ms(syncMax[k])))
		}
		var gc time.Duration
		for _, s := range r.gc {
			if s.from < e.to && s.to > e.from && s.kind == "mark" {
				gc += min(s.to, e.to) - max(s.from, e.from)
			}
		}
		if gc > 0 {
			detail = append(detail, fmt.Sprintf("GC marking for %v of it", ms(gc)))
		}
		e.detail = strings.Join(detail, "; ")
	}
	return eps
}

func dist(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	n := len(ds)
	return fmt.Sprintf("%d, p50 %v, p99 %v, max %v, total %v", n, ms(ds[n/2]), ms(ds[min(n-1, n*99/100)]), ms(ds[n-1]), ms(sum))
}

// ms rounds d for reading: to 10µs below 10ms, to 0.1ms above.
func ms(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(100 * time.Microsecond)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
