package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/hist"
	"github.com/coordcell/coord/bench/internal/member"
	"github.com/coordcell/coord/bench/internal/report"
	"github.com/coordcell/coord/bench/internal/scenario"
)

// The shapes of -shape.
const (
	shapeOne   = "one"   // three members in one process (the default)
	shapeProcs = "procs" // one member per process
	shapeBoth  = "both"
)

// procsSuffix names a scenario's multi-process run in the table and the
// JSON file: "put@procs".
const procsSuffix = "@procs"

// opLoad is the member processes' operation that runs a
// scenario.MemberLoad.
const opLoad = "load"

// procsScenarios are the scenarios the multi-process shape runs.
var procsScenarios = map[string]bool{"put": true, "get": true, "lock": true, "sessions": true, "inflight": true,
	attacksScenario: true, scaleScenario: true}

// runProcs runs scenario name on side with one member per process: a
// fresh cell of member processes (package member, as the soak), each
// running its share of the workers against its own member in-process. Its
// report has the merged figures under the one-process scenario's names,
// and each process's CPU time and peak RSS from its rusage.
func runProcs(ctx context.Context, o *options, exe, side, name string, round int, stderr io.Writer) report.Child {
	sc := name + procsSuffix
	rounds := o.rounds
	if s, err := scenario.ByName(name); err == nil && s.Once {
		rounds = 1
	}
	fmt.Fprintf(stderr, "== %s %s, round %d of %d\n", side, sc, round, rounds)
	ch := report.Child{Side: side, Scenario: sc}
	start := time.Now()
	if name == "inflight" || name == scaleScenario {
		// Each starts its own cells: inflight a fresh one for every stop
		// of every round, scale one with its quota and limits.
		run := runProcsInflight
		if name == scaleScenario {
			run = runProcsScale
		}
		run(ctx, o, exe, side, &ch, stderr)
		ch.WallSeconds = time.Since(start).Seconds()
		for _, p := range ch.Processes {
			ch.CPUSeconds += p.CPUSeconds
			ch.PeakRSS += p.PeakRSS
		}
		fmt.Fprintf(stderr, "== %s %s: %.1fs, CPU %.1fs, peak RSS %.0f MB (sums over %d member processes)\n",
			side, sc, ch.WallSeconds, ch.CPUSeconds, float64(ch.PeakRSS)/(1<<20), len(ch.Processes))
		return ch
	}
	dir, err := os.MkdirTemp(o.dir, "coord-bench-procs-"+side+"-")
	if err != nil {
		ch.Error = err.Error()
		return ch
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, childLimit)
	defer cancel()
	startCtx, cancelStart := context.WithTimeout(ctx, time.Minute)
	c, err := member.StartCell(startCtx, exe, []string{"-" + memberFlag}, side, dir, stderr, member.CellOptions{Env: o.memberEnv()})
	cancelStart()
	if err != nil {
		ch.Error = err.Error()
		return ch
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "   [%s %s] "+format+"\n", append([]any{side, sc}, args...)...)
	}
	if name == attacksScenario {
		ch.Metrics, err = procsAttacks(ctx, c, o.attack, logf)
	} else {
		var profile string // with -profile, each point's member profiles start with it
		if o.profileDir != "" {
			if profile, err = filepath.Abs(filepath.Join(o.profileDir, fmt.Sprintf("%s-%s-r%d", side, sc, round))); err != nil {
				ch.Error = err.Error()
				return ch
			}
		}
		ch.Metrics, err = procsPoints(ctx, c, name, &o.cfg, profile, logf)
	}
	if err != nil {
		ch.Error = err.Error()
	}
	usage, stopErr := c.Stop(30 * time.Second)
	if stopErr != nil && ch.Error == "" {
		ch.Error = "stopping the members: " + stopErr.Error()
	}
	ch.WallSeconds = time.Since(start).Seconds()
	for _, u := range usage {
		ch.Processes = append(ch.Processes, report.Process{CPUSeconds: u.CPU.Seconds(), PeakRSS: u.PeakRSS})
		ch.CPUSeconds += u.CPU.Seconds()
		ch.PeakRSS += u.PeakRSS
	}
	fmt.Fprintf(stderr, "== %s %s: %.1fs, CPU %.1fs, peak RSS %.0f MB (sums over %d member processes)\n",
		side, sc, ch.WallSeconds, ch.CPUSeconds, float64(ch.PeakRSS)/(1<<20), len(usage))
	return ch
}

// procsPoints runs the load points of scenario name, each spread over
// the member processes, and returns the figures. With a profile base,
// each member process writes its CPU profile of each point to
// base-kind-cN-mP.cpu.pprof.
func procsPoints(ctx context.Context, c member.Cell, name string, cfg *scenario.Config, profile string,
	logf func(string, ...any)) ([]scenario.Metric, error) {
	point := func(kind string, workers int) scenario.MemberLoad {
		l := scenario.MemberLoad{Kind: kind, Workers: workers, Warmup: cfg.Warmup, Duration: cfg.Duration,
			ValueSize: cfg.ValueSize, Keys: cfg.GetKeys}
		if profile != "" && kind != scenario.LoadPreload {
			l.Profile = fmt.Sprintf("%s-%s-c%d", profile, kind, workers)
		}
		return l
	}
	var out []scenario.Metric
	switch name {
	case "put":
		for _, n := range cfg.PutClients {
			r, err := spread(ctx, c, point(scenario.LoadPut, n))
			if err != nil {
				return out, fmt.Errorf("put, %d clients: %w", n, err)
			}
			logf("put, %d clients: %.0f ops/s", n, r.rate())
			out = append(out, r.metrics(fmt.Sprintf("put.c%d", n),
				fmt.Sprintf("put %dB, %d clients, 3 procs", cfg.ValueSize, n), "ops/s")...)
		}
	case "get":
		if err := preloadProcs(ctx, c, point(scenario.LoadPreload, 0)); err != nil {
			return nil, err
		}
		for _, kind := range []string{"linearizable", "serializable"} {
			r, err := spread(ctx, c, point("get-"+kind, cfg.GetClients))
			if err != nil {
				return out, fmt.Errorf("%s get: %w", kind, err)
			}
			logf("%s get, %d clients: %.0f ops/s", kind, cfg.GetClients, r.rate())
			out = append(out, r.metrics("get."+kind,
				fmt.Sprintf("get %s, %d clients, 3 procs", kind, cfg.GetClients), "ops/s")...)
		}
	case "sessions":
		return procsKeepAlive(ctx, c, cfg, logf)
	case "lock":
		for _, kind := range []string{"contended", "uncontended"} {
			r, err := spread(ctx, c, point("lock-"+kind, cfg.LockHolders))
			if err != nil {
				return out, fmt.Errorf("%s lock: %w", kind, err)
			}
			logf("%s lock, %d holders: %.0f cycles/s", kind, cfg.LockHolders, r.rate())
			out = append(out, r.metrics("lock."+kind,
				fmt.Sprintf("lock+unlock %s, %d holders, 3 procs", kind, cfg.LockHolders), "cycles/s")...)
		}
	default:
		return nil, fmt.Errorf("scenario %s has no multi-process shape", name)
	}
	return out, nil
}

// procsResult is a load point's results from every process, merged.
type procsResult struct {
	ops, errs int
	elapsed   time.Duration
	lat       hist.Histogram
	// cpu is the member processes' CPU time over the measured window,
	// summed; leaderCPU the share of the process whose member led at its
	// end (-1 when none said it led).
	cpu, leaderCPU float64
}

// cpuPerOp returns CPU seconds per successful operation in µs.
func (r procsResult) cpuPerOp(cpu float64) float64 {
	if n := r.ops - r.errs; n > 0 && cpu >= 0 {
		return cpu * 1e6 / float64(n)
	}
	return 0
}

func (r procsResult) rate() float64 { return float64(r.ops-r.errs) / r.elapsed.Seconds() }

// metrics names the figures as the one-process scenarios do, so the
// table lines both shapes up.
func (r procsResult) metrics(name, label, unit string) []scenario.Metric {
	out := []scenario.Metric{
		{Name: name + ".rate", Label: label + ": throughput", Unit: unit, Value: r.rate(), HigherIsBetter: true},
		{Name: name + ".p50", Label: label + ": p50", Unit: "ms", Value: ms(r.lat.Quantile(50))},
		{Name: name + ".p99", Label: label + ": p99", Unit: "ms", Value: ms(r.lat.Quantile(99))},
		// CPU per operation carries to a bigger machine where the rate on
		// two shared cores does not: it is user + system time of the
		// member processes (each running its member and its share of the
		// callers) over the measured window.
		{Name: name + ".cpu_us", Label: label + ": CPU per op, 3 member processes", Unit: "µs", Value: r.cpuPerOp(r.cpu)},
	}
	if r.leaderCPU >= 0 {
		out = append(out, scenario.Metric{Name: name + ".cpu_us.leader", Label: label + ": CPU per op, the leader's process",
			Unit: "µs", Value: r.cpuPerOp(r.leaderCPU)})
	}
	if r.errs > 0 {
		out = append(out, scenario.Metric{Name: name + ".errors", Label: label + ": errors", Unit: "ops", Value: float64(r.errs)})
	}
	return out
}

// spread runs l with its workers dealt over the processes (worker w on
// process w%3, as the one-process scenarios deal them over members), all
// at once, and merges their results. It fails when every measured
// operation failed, as a one-process point does.
func spread(ctx context.Context, c member.Cell, l scenario.MemberLoad) (procsResult, error) {
	total := l.Workers
	res := make([]scenario.MemberLoadResult, len(c))
	errs := make([]error, len(c))
	var wg sync.WaitGroup
	for p, proc := range c {
		pl := l
		pl.Workers = (total - p + len(c) - 1) / len(c)
		pl.FirstWorker = p * total // disjoint worker numbers, so keys and locks are too
		if pl.Profile != "" {
			pl.Profile += fmt.Sprintf("-m%d.cpu.pprof", p)
		}
		wg.Go(func() { _, errs[p] = proc.Call(ctx, opLoad, pl, &res[p]) })
	}
	wg.Wait()
	out := procsResult{leaderCPU: -1}
	var first string
	for p, r := range res {
		out.ops += r.Ops
		out.errs += r.Errors
		out.lat.Merge(&r.Latency)
		out.cpu += r.CPUSeconds
		if r.Leader {
			out.leaderCPU = r.CPUSeconds
		}
		out.elapsed = max(out.elapsed, time.Duration(r.ElapsedSeconds*float64(time.Second)))
		if first == "" && r.FirstError != "" {
			first = fmt.Sprintf("member %d: %s", p, r.FirstError)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if out.ops > 0 && out.errs == out.ops {
		return out, fmt.Errorf("every operation failed, the first with: %s", first)
	}
	return out, nil
}

// preloadProcs writes the get keys, each process a third of them.
func preloadProcs(ctx context.Context, c member.Cell, l scenario.MemberLoad) error {
	errs := make([]error, len(c))
	var wg sync.WaitGroup
	for p, proc := range c {
		pl := l
		pl.Workers, pl.FirstWorker = len(c), p
		wg.Go(func() { _, errs[p] = proc.Call(ctx, opLoad, pl, nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
