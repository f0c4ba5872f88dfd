package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/coordcell"
	"github.com/coordcell/coord/bench/internal/etcdcell"
	"github.com/coordcell/coord/bench/internal/frontcell"
	"github.com/coordcell/coord/bench/internal/proc"
	"github.com/coordcell/coord/bench/internal/report"
	"github.com/coordcell/coord/bench/internal/scenario"
)

// runChild runs the one scenario on the one side that o.child names
// ("side:scenario", or "side:scenario:round" for one of several interleaved
// rounds, which names its profile and trace files) and writes a report.Child as JSON to stdout. A
// failing scenario is reported in the JSON, not by the exit code.
func runChild(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	side, name, _ := strings.Cut(o.child, ":")
	name, round, _ := strings.Cut(name, ":")
	base := side + "-" + name
	if o.rounds > 1 && round != "" {
		base += "-r" + round // each round's profiles and traces are their own
	}
	sc, err := scenario.ByName(name)
	if err != nil {
		fmt.Fprintln(stderr, "bench child:", err)
		return 2
	}
	open, err := opener(side, o.etcdClient, sc.EtcdFront)
	if err != nil {
		fmt.Fprintln(stderr, "bench child:", err)
		return 2
	}
	if o.profileDir != "" {
		stopProfile, err := startProfile(o.profileDir, base)
		if err != nil {
			fmt.Fprintln(stderr, "bench child:", err)
			return 1
		}
		defer stopProfile()
	}
	if o.traceDir != "" {
		stopTrace, err := startTrace(o.traceDir, base)
		if err != nil {
			fmt.Fprintln(stderr, "bench child:", err)
			return 1
		}
		defer stopTrace()
	}
	start := time.Now()
	var dirs []string
	env := scenario.Env{
		Open: func(ctx context.Context) (cell.Cell, error) {
			dir, err := os.MkdirTemp(o.dir, "coord-bench-"+side+"-")
			if err != nil {
				return nil, err
			}
			dirs = append(dirs, dir)
			return open(ctx, cell.Options{Dir: dir})
		},
		Logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "   [%s %s] "+format+"\n", append([]any{side, name}, args...)...)
		},
	}
	metrics, err := sc.Run(ctx, env, o.cfg)
	res := report.Child{Side: side, Scenario: name, Metrics: metrics, WallSeconds: time.Since(start).Seconds()}
	if err != nil {
		res.Error = err.Error()
	}
	if mem, err := proc.ReadMemory(); err == nil {
		res.VmHWM = mem.PeakRSS
	}
	for _, d := range dirs {
		os.RemoveAll(d)
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintln(stderr, "bench child:", err)
		return 1
	}
	return 0
}

// opener returns the cell opener of side; with front, coord's cell
// serves etcd's API on each member (the etcd-* scenarios).
func opener(side string, mode etcdcell.ClientMode, front bool) (cell.Opener, error) {
	switch side {
	case "coord":
		if front {
			return frontcell.Open, nil
		}
		return coordcell.Open, nil
	case "etcd":
		return etcdcell.Opener(mode), nil
	}
	return nil, fmt.Errorf("unknown side %q", side)
}

// startProfile starts a CPU profile written to dir/base.cpu.pprof; the
// function it returns stops it and writes the allocation profile to
// dir/base.allocs.pprof.
func startProfile(dir, base string) (func(), error) {
	stop, err := startRecording(dir, base+".cpu.pprof", pprof.StartCPUProfile, pprof.StopCPUProfile)
	if err != nil {
		return nil, err
	}
	return func() {
		stop()
		if a, err := os.Create(filepath.Join(dir, base+".allocs.pprof")); err == nil {
			pprof.Lookup("allocs").WriteTo(a, 0)
			a.Close()
		}
	}, nil
}

// startTrace starts a runtime execution trace written to
// dir/base.trace; the function it returns stops it.
func startTrace(dir, base string) (func(), error) {
	return startRecording(dir, base+".trace", trace.Start, trace.Stop)
}

// startRecording creates dir/name and starts a recording into it; the
// function it returns stops the recording and closes the file.
func startRecording(dir, name string, start func(io.Writer) error, stop func()) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		stop()
		f.Close()
	}, nil
}
