package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/member"
	"github.com/coordcell/coord/bench/internal/soak"
)

// soakOptions are the -soak flags.
type soakOptions struct {
	duration     time.Duration
	interval     time.Duration
	out          string
	putRate      float64
	sessionRate  float64
	lockRate     float64
	keys         int
	watchers     int
	lockNames    int
	lockSessions int
	keep         bool
}

// soakInterval is one report line of a soak, all processes together
// (slices are by member).
type soakInterval struct {
	ElapsedSeconds float64   `json:"elapsed_seconds"`
	DataBytes      []int64   `json:"data_bytes"`
	RSS            []int64   `json:"rss"`
	CPUSeconds     []float64 `json:"cpu_seconds"` // since each process started
	CPUPercent     []float64 `json:"cpu_percent"` // over the interval
	Puts           uint64    `json:"puts"`
	PutP50Ms       float64   `json:"put_p50_ms"`
	PutP99Ms       float64   `json:"put_p99_ms"`
	PutMaxMs       float64   `json:"put_max_ms"`
	LockCycles     uint64    `json:"lock_cycles"`
	LockP99Ms      float64   `json:"lock_p99_ms"`
	Sessions       uint64    `json:"sessions"`
	SessionP99Ms   float64   `json:"session_p99_ms"`
	WatchEvents    uint64    `json:"watch_events"`
	Errors         uint64    `json:"errors"`
	FirstError     string    `json:"first_error,omitempty"`
}

// soakSummary sums a soak up.
type soakSummary struct {
	DataBytesFirst []int64 `json:"data_bytes_first"`
	DataBytesLast  []int64 `json:"data_bytes_last"`
	DataBytesMax   []int64 `json:"data_bytes_max"`
	// PutP99MaxMs is the worst interval's put p99, at PutP99MaxAt
	// seconds; PutP99Ms is the whole run's.
	PutP99MaxMs float64 `json:"put_p99_max_ms"`
	PutP99MaxAt float64 `json:"put_p99_max_at_seconds"`
	PutP99Ms    float64 `json:"put_p99_ms"`
	PutMaxMs    float64 `json:"put_max_ms"`
	LockP99Ms   float64 `json:"lock_p99_ms"`
	Puts        uint64  `json:"puts"`
	LockCycles  uint64  `json:"lock_cycles"`
	Sessions    uint64  `json:"sessions"`
	Errors      uint64  `json:"errors"`
	// PeakRSS and CPUSeconds are each process's, from its rusage.
	PeakRSS    []int64   `json:"peak_rss"`
	CPUSeconds []float64 `json:"cpu_seconds"`
}

// soakResults is the soak's JSON file.
type soakResults struct {
	Command   string         `json:"command"`
	Started   time.Time      `json:"started"`
	Machine   machine        `json:"machine"`
	Pids      []int          `json:"pids"`
	Load      soak.Config    `json:"load_per_process"`
	Intervals []soakInterval `json:"intervals"`
	Summary   *soakSummary   `json:"summary,omitempty"`
	Error     string         `json:"error,omitempty"`
}

// runSoak runs the soak: three coord member processes with the load
// inside them, one report line per interval, a summary and the JSON
// file. ctx ending (SIGINT) ends it early, cleanly.
func runSoak(ctx context.Context, o *options, args []string, stdout, stderr io.Writer) int {
	so := &o.soak
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	dir, err := os.MkdirTemp(o.dir, "coord-soak-")
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if !so.keep {
		defer os.RemoveAll(dir)
	}
	const n = 3
	res := soakResults{
		Command: strings.Join(append([]string{"go run ./bench"}, args...), " "),
		Started: time.Now(),
		Machine: readMachine(),
		Load: soak.Config{
			PutRate: so.putRate / n, SessionRate: so.sessionRate / n, LockRate: so.lockRate / n,
			Keys: so.keys, ValueSize: o.cfg.ValueSize, Watchers: so.watchers,
			LockNames: so.lockNames, LockSessions: so.lockSessions, SessionTTL: o.cfg.SessionTTL,
		},
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := member.StartCell(startCtx, exe, []string{"-" + memberFlag}, "coord", dir, stderr, member.CellOptions{Env: o.memberEnv()})
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "bench: soak:", err)
		return 1
	}
	for _, p := range c {
		res.Pids = append(res.Pids, p.Pid())
	}
	var dirs []string
	for _, p := range c {
		dirs = append(dirs, p.Spec.Member.Dir)
	}
	fmt.Fprintf(stdout, "soak: %s\n", res.Command)
	fmt.Fprintf(stdout, "soak: 3 coord member processes (pids %v) over TCP on loopback, data under %s\n", res.Pids, dir)
	fmt.Fprintf(stdout, "soak: %.0f puts/s over %d keys, %.0f sessions/s, %.0f lock cycles/s on %d locks, %d watchers; open loop, latency from the due time; a line every %v for %v\n",
		so.putRate, so.keys, so.sessionRate, so.lockRate, so.lockNames, n*so.watchers, so.interval, so.duration)
	runErr := soakLoop(ctx, c, dirs, so, &res, stdout)
	usage, stopErr := c.Stop(30 * time.Second)
	if stopErr != nil && runErr == nil && ctx.Err() == nil {
		runErr = fmt.Errorf("stopping the members: %w", stopErr)
	}
	if len(res.Intervals) > 0 {
		res.Summary = summarize(res.Intervals, res.Summary)
		for _, u := range usage {
			res.Summary.PeakRSS = append(res.Summary.PeakRSS, u.PeakRSS)
			res.Summary.CPUSeconds = append(res.Summary.CPUSeconds, u.CPU.Seconds())
		}
		printSummary(stdout, res.Summary)
	}
	if runErr != nil {
		res.Error = runErr.Error()
		fmt.Fprintln(stderr, "bench: soak:", runErr)
	}
	if err := writeJSON(so.out, res); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "soak: results in %s\n", so.out)
	if runErr != nil {
		return 1
	}
	return 0
}

// soakLoop starts the load in every process and reports every interval
// until the duration is over or ctx ends, then stops the load and
// reports the last (partial) interval. res.Summary gets the whole run's
// latencies.
func soakLoop(ctx context.Context, c member.Cell, dirs []string, so *soakOptions, res *soakResults, stdout io.Writer) error {
	callCtx := context.WithoutCancel(ctx)
	for i, p := range c {
		cfg := res.Load
		cfg.Seed = uint64(res.Started.UnixNano()) + uint64(i)
		if _, err := p.Call(callCtx, soak.OpStart, cfg, nil); err != nil {
			return err
		}
	}
	start := time.Now()
	last := start
	lastCPU := make([]float64, len(c))
	var total soak.Interval
	fmt.Fprintln(stdout, soakHeader)
	report := func(op string) error {
		ivs := make([]soak.Interval, len(c))
		us := make([]member.Usage, len(c))
		errs := make([]error, len(c))
		var wg sync.WaitGroup
		for i, p := range c {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(callCtx, time.Minute)
				defer cancel()
				us[i], errs[i] = p.Call(cctx, op, nil, &ivs[i])
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		now := time.Now()
		var iv soak.Interval
		for i := range ivs {
			iv.Merge(&ivs[i])
		}
		total.Merge(&iv)
		line := soakInterval{
			ElapsedSeconds: now.Sub(start).Seconds(),
			Puts:           iv.Put.Count(), PutP50Ms: ms(iv.Put.Quantile(50)), PutP99Ms: ms(iv.Put.Quantile(99)),
			PutMaxMs: ms(iv.Put.Max()), LockCycles: iv.Lock.Count(), LockP99Ms: ms(iv.Lock.Quantile(99)),
			Sessions: iv.Session.Count(), SessionP99Ms: ms(iv.Session.Quantile(99)),
			WatchEvents: iv.WatchEvents, Errors: iv.Errors(), FirstError: iv.FirstError,
		}
		for i, u := range us {
			line.DataBytes = append(line.DataBytes, dirBytes(dirs[i]))
			line.RSS = append(line.RSS, u.RSS)
			line.CPUSeconds = append(line.CPUSeconds, u.CPUSeconds)
			line.CPUPercent = append(line.CPUPercent, 100*(u.CPUSeconds-lastCPU[i])/now.Sub(last).Seconds())
			lastCPU[i] = u.CPUSeconds
		}
		last = now
		res.Intervals = append(res.Intervals, line)
		res.Summary = &soakSummary{PutP99Ms: ms(total.Put.Quantile(99)), PutMaxMs: ms(total.Put.Max()),
			LockP99Ms: ms(total.Lock.Quantile(99))}
		printInterval(stdout, line)
		// The file is rewritten every interval, so a run that dies
		// still leaves its lines.
		return writeJSON(so.out, res)
	}
	for i := range c {
		// The first reading of CPU is the load's start, not the
		// process's: opening the member is not the soak's cost.
		u, err := c[i].Call(callCtx, soak.OpReport, nil, nil)
		if err != nil {
			return err
		}
		lastCPU[i] = u.CPUSeconds
	}
	end := time.NewTimer(so.duration)
	defer end.Stop()
	tick := time.NewTicker(so.interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := report(soak.OpReport); err != nil {
				return err
			}
			continue
		case <-end.C:
		case <-ctx.Done():
			fmt.Fprintln(stdout, "soak: interrupted")
		}
		return report(soak.OpStop)
	}
}

const soakHeader = "  elapsed |  data MB m0/m1/m2   |  RSS MB m0/m1/m2 | CPU % m0/m1/m2 |  puts  put p50/p99/max ms | locks p99 ms | sess p99 ms | watch ev | errors"

func printInterval(w io.Writer, l soakInterval) {
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Fprintf(w, "%9s | %6.1f %6.1f %6.1f | %5.0f %5.0f %5.0f | %4.0f %4.0f %4.0f | %6d %5.1f/%5.1f/%6.1f | %5d %6.1f | %4d %6.1f | %8d | %d\n",
		(time.Duration(l.ElapsedSeconds) * time.Second).String(),
		mb(at(l.DataBytes, 0)), mb(at(l.DataBytes, 1)), mb(at(l.DataBytes, 2)),
		mb(at(l.RSS, 0)), mb(at(l.RSS, 1)), mb(at(l.RSS, 2)),
		at(l.CPUPercent, 0), at(l.CPUPercent, 1), at(l.CPUPercent, 2),
		l.Puts, l.PutP50Ms, l.PutP99Ms, l.PutMaxMs, l.LockCycles, l.LockP99Ms, l.Sessions, l.SessionP99Ms,
		l.WatchEvents, l.Errors)
	if l.FirstError != "" {
		fmt.Fprintf(w, "          first error: %s\n", l.FirstError)
	}
}

// at returns s[i], or zero past its end.
func at[T any](s []T, i int) T {
	var zero T
	if i < len(s) {
		return s[i]
	}
	return zero
}

// summarize sums the intervals up into s (which holds the whole run's
// latencies already, or is nil).
func summarize(ivs []soakInterval, s *soakSummary) *soakSummary {
	if s == nil {
		s = &soakSummary{}
	}
	first, last := ivs[0], ivs[len(ivs)-1]
	s.DataBytesFirst, s.DataBytesLast = first.DataBytes, last.DataBytes
	s.DataBytesMax = make([]int64, len(first.DataBytes))
	for _, iv := range ivs {
		for i, b := range iv.DataBytes {
			if i < len(s.DataBytesMax) {
				s.DataBytesMax[i] = max(s.DataBytesMax[i], b)
			}
		}
		if iv.PutP99Ms > s.PutP99MaxMs {
			s.PutP99MaxMs, s.PutP99MaxAt = iv.PutP99Ms, iv.ElapsedSeconds
		}
		s.Puts += iv.Puts
		s.LockCycles += iv.LockCycles
		s.Sessions += iv.Sessions
		s.Errors += iv.Errors
	}
	return s
}

func printSummary(w io.Writer, s *soakSummary) {
	mbs := func(bs []int64) string {
		var parts []string
		for _, b := range bs {
			parts = append(parts, fmt.Sprintf("%.1f", float64(b)/(1<<20)))
		}
		return strings.Join(parts, "/")
	}
	fmt.Fprintf(w, "soak summary:\n")
	fmt.Fprintf(w, "  data dir MB by member: first interval %s, last %s, max %s\n",
		mbs(s.DataBytesFirst), mbs(s.DataBytesLast), mbs(s.DataBytesMax))
	fmt.Fprintf(w, "  put p99: worst interval %.1f ms (at %s), whole run %.1f ms, max %.1f ms; lock cycle p99 %.1f ms\n",
		s.PutP99MaxMs, time.Duration(s.PutP99MaxAt*float64(time.Second)).Round(time.Second), s.PutP99Ms, s.PutMaxMs, s.LockP99Ms)
	fmt.Fprintf(w, "  %d puts, %d lock cycles, %d sessions, %d errors\n", s.Puts, s.LockCycles, s.Sessions, s.Errors)
	var cpu []string
	for _, c := range s.CPUSeconds {
		cpu = append(cpu, fmt.Sprintf("%.1f", c))
	}
	fmt.Fprintf(w, "  per process: peak RSS MB %s, CPU s %s\n", mbs(s.PeakRSS), strings.Join(cpu, "/"))
}

// dirBytes returns the bytes of the files under dir. Files vanish while
// it walks (compactions, log truncation): those are skipped.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
