package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/member"
	"github.com/coordcell/coord/bench/internal/proc"
	"github.com/coordcell/coord/bench/internal/report"
	"github.com/coordcell/coord/bench/internal/scale"
	"github.com/coordcell/coord/bench/internal/scenario"
)

// scaleScenario is issue 27's scale run, against member processes.
const scaleScenario = "scale"

// The key spaces of the scale scenario.
const (
	scaleLoadPrefix  = "scale/k/"  // the keys loaded
	scaleWatchPrefix = "scale/w/"  // the puts the watch from far back replays
	scaleQuotaPrefix = "scale/q/"  // the growth to the cap
	scaleCheckPrefix = "scale/qc/" // the writes tried at the cap
)

// scaleOptions are the -scale-* flags.
type scaleOptions struct {
	Keys        int           `json:"keys"`
	ValueSize   int           `json:"value_size"`
	Batch       int           `json:"batch"`
	LoadWriters int           `json:"load_writers"`
	PutClients  int           `json:"put_clients"`
	ListKeys    int           `json:"list_keys"`
	ListPage    int           `json:"list_page"`
	WatchBack   int           `json:"watch_back"`
	Sessions    int           `json:"sessions"`
	Watches     int           `json:"watches"`
	Clients     int           `json:"clients"`
	Hold        time.Duration `json:"hold"`
	// Settle bounds the wait for the members' CPU to fall to idle after
	// the load points (their compactions of the load done) before the
	// put point runs again on the settled cell; 0 skips it.
	Settle     time.Duration `json:"settle"`
	Quota      string        `json:"quota"`
	GoMemLimit string        `json:"gomemlimit"`
	Limit      time.Duration `json:"limit"`
	// MemFloor stops the growth to the cap while the machine has less
	// memory available than this (other work shares it).
	MemFloor string `json:"mem_floor"`
	memFloor int64
	// quotaBytes is Quota parsed (0: the sides' default).
	quotaBytes int64
}

// scaleDefaultQuota is both sides' default keyspace cap: coord's
// Config.QuotaBytes, etcd's QuotaBackendBytes.
const scaleDefaultQuota = 2 << 30

// check validates the flags and parses the quota.
func (s *scaleOptions) check() error {
	for name, v := range map[string]int{"scale-keys": s.Keys, "scale-batch": s.Batch, "scale-load-writers": s.LoadWriters,
		"scale-put-clients": s.PutClients, "scale-list-page": s.ListPage, "scale-clients": s.Clients} {
		if v < 1 {
			return fmt.Errorf("-%s must be at least 1", name)
		}
	}
	for name, v := range map[string]int{"scale-value-size": s.ValueSize, "scale-list": s.ListKeys, "scale-watch-back": s.WatchBack,
		"scale-sessions": s.Sessions, "scale-watches": s.Watches} {
		if v < 0 {
			return fmt.Errorf("-%s must not be negative", name)
		}
	}
	if s.Batch > 128 {
		return errors.New("-scale-batch: at most 128, both sides' default bound on a transaction's operations")
	}
	if s.Quota != "" {
		b, err := parseBytes(s.Quota)
		if err != nil || b < 1 {
			return fmt.Errorf("-scale-quota %q: want bytes, e.g. 64MiB", s.Quota)
		}
		s.quotaBytes = b
	}
	if _, _, err := s.memLimit(1); err != nil {
		return err
	}
	if s.MemFloor != "" {
		b, err := parseBytes(s.MemFloor)
		if err != nil {
			return fmt.Errorf("-scale-mem-floor %q: want bytes, e.g. 3GiB", s.MemFloor)
		}
		s.memFloor = b
	}
	if s.Hold <= 0 || s.Limit <= 0 {
		return errors.New("-scale-hold and -scale-limit must be positive")
	}
	return nil
}

// cap is the keyspace cap the cell grows to.
func (s *scaleOptions) cap() int64 {
	if s.quotaBytes > 0 {
		return s.quotaBytes
	}
	return scaleDefaultQuota
}

// memLimit returns the memory limit of the second memory figure for a
// member holding live bytes of data, and false when it is off.
func (s *scaleOptions) memLimit(live int64) (int64, bool, error) {
	v := strings.TrimSpace(s.GoMemLimit)
	if v == "" || v == "off" {
		return 0, false, nil
	}
	if f, ok := strings.CutSuffix(v, "x"); ok {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			return 0, false, fmt.Errorf("-scale-gomemlimit %q: want e.g. 1.25x or 1300MiB", s.GoMemLimit)
		}
		return int64(r * float64(live)), true, nil
	}
	b, err := parseBytes(v)
	if err != nil || b < 1 {
		return 0, false, fmt.Errorf("-scale-gomemlimit %q: want e.g. 1.25x or 1300MiB", s.GoMemLimit)
	}
	return b, true, nil
}

// parseBytes parses a size in GOMEMLIMIT's syntax: a number of bytes
// with an optional B, KiB, MiB, GiB or TiB suffix.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 || f*mult > math.MaxInt64 {
		return 0, fmt.Errorf("size %q", s)
	}
	return int64(f * mult), nil
}

// scaleRun is one side's scale run: its cell, its figures so far.
type scaleRun struct {
	o      *options
	s      *scaleOptions
	exe    string
	side   string
	dir    string
	stderr io.Writer
	logf   func(string, ...any)
	c      member.Cell
	// usage is what the processes that ended early (killed, or the
	// joiner) used, added to the final processes' by index.
	usage   map[int]proc.Usage
	metrics []scenario.Metric
	// live is the bytes of keys and values loaded: what each member
	// holds.
	live int64
	// empty is the load points on the empty cell, by name.
	empty map[string]procsResult
}

// add appends a figure.
func (r *scaleRun) add(name, label, unit string, v float64, higherIsBetter bool) {
	r.metrics = append(r.metrics, scenario.Metric{Name: "scale." + name, Label: "scale: " + label, Unit: unit, Value: v,
		HigherIsBetter: higherIsBetter})
}

// call calls process i.
func (r *scaleRun) call(ctx context.Context, i int, op string, body, out any) error {
	_, err := r.c[i].Call(ctx, op, body, out)
	return err
}

// scaleEach calls op on every process at once, process i with body(i).
func scaleEach[T any](ctx context.Context, r *scaleRun, op string, body func(i int) any) ([]T, error) {
	return callAll[T](ctx, r.c, op, body)
}

// mems reads every member's memory, after a GC with gc. The GCs run one
// member at a time: three at once, with 500,000 watches held, took the
// whole machine long enough for clients to leave their members (each
// then resuming its 5,000 watches on another), and the measurement
// itself lost the sessions it was measuring.
func (r *scaleRun) mems(ctx context.Context, gc bool) ([]scale.Mem, error) {
	if !gc {
		return scaleEach[scale.Mem](ctx, r, scale.OpMem, func(int) any { return scale.MemRequest{} })
	}
	out := make([]scale.Mem, len(r.c))
	for i := range r.c {
		if err := r.call(ctx, i, scale.OpMem, scale.MemRequest{GC: true}, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// leader returns the index of the process whose member leads, and a
// follower's.
func (r *scaleRun) leader(ctx context.Context) (leader, follower int, err error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		sts, err := scaleEach[cell.ScaleStatus](ctx, r, scale.OpStatus, func(int) any { return nil })
		if err != nil {
			return -1, -1, err
		}
		leader, follower = -1, -1
		for i, st := range sts {
			if st.Leader {
				leader = i
			} else if follower < 0 {
				follower = i
			}
		}
		if leader >= 0 && follower >= 0 {
			return leader, follower, nil
		}
		if time.Now().After(deadline) {
			return -1, -1, errors.New("scale: no leader among the member processes")
		}
		sleepUntil(ctx, time.Now().Add(100*time.Millisecond))
	}
}

// runProcsScale runs the scale scenario on side: a fresh cell of three
// member processes, the phases one after the other, then the processes'
// usage.
func runProcsScale(ctx context.Context, o *options, exe, side string, ch *report.Child, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, o.scale.Limit)
	defer cancel()
	stderr = member.SyncWriter(stderr)
	dir, err := os.MkdirTemp(o.dir, "coord-bench-scale-"+side+"-")
	if err != nil {
		ch.Error = err.Error()
		return
	}
	defer os.RemoveAll(dir)
	r := &scaleRun{o: o, s: &o.scale, exe: exe, side: side, dir: dir, stderr: stderr, usage: map[int]proc.Usage{},
		logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "   [%s %s] %s "+format+"\n", append([]any{side, ch.Scenario, time.Now().Format("15:04:05")}, args...)...)
		}}
	spec := cell.ScaleSpec{QuotaBytes: o.scale.quotaBytes, Metrics: true,
		// Every watch is of its own prefix, none merged: each client
		// holds its share of them on its member.
		ClientMaxWatchers: max(0, (o.scale.Watches+o.scale.Clients-1)/o.scale.Clients+16)}
	startCtx, cancelStart := context.WithTimeout(ctx, 2*time.Minute)
	r.c, err = member.StartCell(startCtx, exe, []string{"-" + memberFlag}, side, dir, stderr,
		member.CellOptions{Env: o.memberEnv(), Scale: spec})
	cancelStart()
	if err != nil {
		ch.Error = err.Error()
		return
	}
	err = r.phases(ctx)
	ch.Metrics = r.metrics
	if err != nil {
		ch.Error = err.Error()
		r.logf("FAILED: %v", err)
	}
	usage, stopErr := r.c.Stop(30 * time.Second)
	if stopErr != nil && ch.Error == "" {
		ch.Error = "stopping the members: " + stopErr.Error()
	}
	for i, u := range usage {
		if e, ok := r.usage[i]; ok {
			u.CPU += e.CPU
			u.PeakRSS = max(u.PeakRSS, e.PeakRSS)
		}
		ch.Processes = append(ch.Processes, report.Process{CPUSeconds: u.CPU.Seconds(), PeakRSS: u.PeakRSS})
	}
}

// phases runs the scale scenario's phases in order; the first that fails
// ends it, with the figures of those before.
func (r *scaleRun) phases(ctx context.Context) error {
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"empty cell", r.phaseEmpty},
		{"load", r.phaseLoad},
		{"memory, loaded", r.phaseLoadedMemory},
		{"points, loaded", r.phaseLoadedPoints},
		{"points, loaded and settled", r.phaseSettledPoints},
		{"memory limit", r.phaseMemLimit},
		{"list", r.phaseList},
		{"watch from far back", r.phaseWatch},
		// The join first: etcd refuses a member change for a while after
		// a member restarted ("unhealthy cluster").
		{"join", r.phaseJoin},
		{"restart", r.phaseRestart},
		{"sessions and watches through clients", r.phaseHold},
		{"quota", r.phaseQuota},
	}
	for _, st := range steps {
		start := time.Now()
		r.logf("%s...", st.name)
		if err := st.f(ctx); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		r.logf("%s done in %v", st.name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}
