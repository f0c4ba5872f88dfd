package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/member"
	"github.com/coordcell/coord/bench/internal/proc"
	"github.com/coordcell/coord/bench/internal/report"
	"github.com/coordcell/coord/bench/internal/scenario"
)

const (
	// inflightLead is the time a survivor's share gets, before its
	// writers' warm-up counts, to receive the request and start them.
	inflightLead = 100 * time.Millisecond
	// probeEvery is how often each of the two survivors starts a write
	// attempt after the stop: together one every 2 ms, as the
	// one-process shape's.
	probeEvery = 4 * time.Millisecond
	// probeGuard is how long after the planned stop the survivors go on
	// probing: past any delay of the parent in stopping the leader.
	probeGuard = 200 * time.Millisecond
	// haltGrace is how long after the planned stop the survivors' writers
	// go on starting writes, so they still have them in flight when the
	// parent, a little late, stops the leader. A stop later than this
	// finds fewer writes in flight (the count says so).
	haltGrace = 20 * time.Millisecond
	// inflightCallLimit bounds one survivor's share, stop to results.
	inflightCallLimit = 2 * time.Minute
)

// runProcsInflight runs the inflight scenario with one member per
// process: for each stop mode, o.cfg.InflightCells fresh cells of member
// processes; in each, the two survivors' processes write until the
// leader's process is killed (kill -9: crash) or its member closed
// (graceful), and the parent times each write in flight at that moment
// to its result. Each member process's CPU time is summed over the
// cells, its peak RSS the largest.
func runProcsInflight(ctx context.Context, o *options, exe, side string, ch *report.Child, stderr io.Writer) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "   [%s %s] "+format+"\n", append([]any{side, ch.Scenario}, args...)...)
	}
	var procs []report.Process
	for _, mode := range o.cfg.InflightStops {
		var cells []scenario.InflightCell
		for r := range o.cfg.InflightCells {
			res, usage, err := procsInflightCell(ctx, o, exe, side, mode, stderr, logf)
			for i, u := range usage {
				if i >= len(procs) {
					procs = append(procs, report.Process{})
				}
				procs[i].CPUSeconds += u.CPU.Seconds()
				procs[i].PeakRSS = max(procs[i].PeakRSS, u.PeakRSS)
			}
			if err != nil {
				ch.Error = fmt.Sprintf("in flight, %s, cell %d: %v", mode, r+1, err)
				break
			}
			logf("in flight across a %s stop, cell %d: %s", mode, r+1, res)
			cells = append(cells, res)
		}
		if ch.Error != "" {
			break
		}
		ms := scenario.InflightMetrics(mode, o.cfg.InflightWriters, cells)
		for i := range ms {
			ms[i].Label += ", 3 procs"
		}
		ch.Metrics = append(ch.Metrics, ms...)
	}
	ch.Processes = procs
}

// procsInflightCell runs one in-flight round on a fresh cell of member
// processes and returns its accounting and what each process used.
func procsInflightCell(ctx context.Context, o *options, exe, side string, mode cell.StopMode,
	stderr io.Writer, logf func(string, ...any)) (scenario.InflightCell, []proc.Usage, error) {
	dir, err := os.MkdirTemp(o.dir, "coord-bench-procs-"+side+"-")
	if err != nil {
		return scenario.InflightCell{}, nil, err
	}
	defer os.RemoveAll(dir)
	var c member.Cell
	for try := 1; ; try++ {
		startCtx, cancelStart := context.WithTimeout(ctx, time.Minute)
		c, err = member.StartCell(startCtx, exe, []string{"-" + memberFlag}, side, dir, stderr, member.CellOptions{Env: o.memberEnv()})
		cancelStart()
		if !cell.PortTaken(err) || try == cell.OpenRetries || ctx.Err() != nil {
			break
		}
		logf("cell start found a port taken (%v): again on fresh ports", err)
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return scenario.InflightCell{}, nil, err
		}
	}
	if err != nil {
		return scenario.InflightCell{}, nil, err
	}
	res, err := procsInflightRound(ctx, c, o.cfg, mode, logf)
	usage, stopErr := c.Stop(30 * time.Second)
	if err == nil && stopErr != nil {
		err = fmt.Errorf("stopping the members: %w", stopErr)
	}
	return res, usage, err
}

// procsInflightRound finds the leader's process, starts the survivors'
// shares, stops the leader at the planned instant, and accounts.
func procsInflightRound(ctx context.Context, c member.Cell, cfg scenario.Config, mode cell.StopMode,
	logf func(string, ...any)) (scenario.InflightCell, error) {
	leader, err := procsLeader(ctx, c)
	if err != nil {
		return scenario.InflightCell{}, err
	}
	var survivors []*member.Proc
	for i, p := range c {
		if i != leader {
			survivors = append(survivors, p)
		}
	}
	stopAt := time.Now().Add(inflightLead + cfg.Warmup)
	shares := make([]*scenario.InflightShareResult, len(survivors))
	errs := make([]error, len(survivors))
	callCtx, cancel := context.WithTimeout(ctx, inflightCallLimit)
	defer cancel()
	var wg sync.WaitGroup
	for i, p := range survivors {
		sh := scenario.InflightShare{
			Writers: (cfg.InflightWriters - i + len(survivors) - 1) / len(survivors), Process: i, ValueSize: cfg.ValueSize,
			StopAt: stopAt.UnixNano(), HaltGrace: haltGrace,
			ProbeOffset: time.Duration(i) * probeEvery / time.Duration(len(survivors)), ProbeEvery: probeEvery, ProbeGuard: probeGuard,
		}
		wg.Go(func() {
			shares[i] = new(scenario.InflightShareResult)
			_, errs[i] = p.Call(callCtx, opInflight, sh, shares[i])
		})
	}
	sleepUntil(ctx, stopAt)
	stopped := make(chan error, 1)
	t0 := time.Now()
	if mode == cell.Crash {
		stopped <- c[leader].Kill()
	} else {
		go func() { _, err := c[leader].Call(callCtx, opCloseGracefully, nil, nil); stopped <- err }()
	}
	wg.Wait()
	if err := errors.Join(append(errs, <-stopped)...); err != nil {
		return scenario.InflightCell{}, err
	}
	if late := t0.Sub(stopAt); late > haltGrace {
		logf("the %s stop came %v after its time, past the writers' halt (%v): fewer writes were in flight", mode, late.Round(time.Millisecond), haltGrace)
	}
	return scenario.InflightFromShares(t0, shares)
}

// procsLeader returns the index of the process whose member leads,
// asking each until exactly one says it does (the cell has just
// committed a write, so that is soon).
func procsLeader(ctx context.Context, c member.Cell) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		leader, n := -1, 0
		for i, p := range c {
			var leads bool
			if _, err := p.Call(ctx, opLeads, nil, &leads); err != nil {
				return -1, err
			}
			if leads {
				leader, n = i, n+1
			}
		}
		if n == 1 {
			return leader, nil
		}
		sleepUntil(ctx, time.Now().Add(20*time.Millisecond))
		if ctx.Err() != nil {
			return -1, fmt.Errorf("no one leader among the member processes: %w", ctx.Err())
		}
	}
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}
