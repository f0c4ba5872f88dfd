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

	"github.com/coordcell/coord/bench/internal/cell"
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
	// SegmentsStarted and SegmentsInline are each member's log segments
	// started since it opened, and of them those filled on the append
	// path (-1 where the side does not count them).
	SegmentsStarted []int64 `json:"segments_started"`
	SegmentsInline  []int64 `json:"segments_filled_inline"`
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
	// SegmentsStarted and SegmentsInline are the log segments the
	// members started over the run and those of them filled on the
	// append path, summed (-1 where the side does not count them).
	SegmentsStarted int64 `json:"segments_started"`
	SegmentsInline  int64 `json:"segments_filled_inline"`
	// PeakRSS and CPUSeconds are each process's, from its rusage.
	PeakRSS    []int64   `json:"peak_rss"`
	CPUSeconds []float64 `json:"cpu_seconds"`
}

// soakSide is one side's cell in a soak: its member processes, its
// report lines and its summary.
type soakSide struct {
	Side      string         `json:"side"`
	Pids      []int          `json:"pids"`
	Intervals []soakInterval `json:"intervals"`
	Summary   *soakSummary   `json:"summary,omitempty"`
	Error     string         `json:"error,omitempty"`
}

// soakResults is the soak's JSON file.
type soakResults struct {
	Command string      `json:"command"`
	Started time.Time   `json:"started"`
	Machine machine     `json:"machine"`
	Load    soak.Config `json:"load_per_process"`
	Sides   []*soakSide `json:"sides"`
	// Compare holds, interval by interval, coord's put p99 and max
	// beside etcd's, when both sides ran.
	Compare *soakCompare `json:"compare,omitempty"`
}

// soakResultsFile guards the results while every side's loop adds its
// lines and rewrites the file.
type soakResultsFile struct {
	mu   sync.Mutex
	res  *soakResults
	path string
	out  io.Writer
}

// update runs fn on the results under the lock, then rewrites the file,
// so a run that dies still leaves its lines.
func (f *soakResultsFile) update(fn func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	return writeJSON(f.path, f.res)
}

// print writes a line under the lock, so the sides' lines do not mix.
func (f *soakResultsFile) print(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(f.out, format, args...)
}

// runSoak runs the soak: for each side of -sides, three member
// processes with the load inside them, the sides at the same time so
// they share the machine's load; one report line per side per interval,
// a summary per side, when both ran the comparison interval by
// interval, and the JSON file. ctx ending (SIGINT) ends it early,
// cleanly.
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
	res := &soakResults{
		Command: strings.Join(append([]string{"go run ./bench"}, args...), " "),
		Started: time.Now(),
		Machine: readMachine(),
		Load: soak.Config{
			PutRate: so.putRate / n, SessionRate: so.sessionRate / n, LockRate: so.lockRate / n,
			Keys: so.keys, ValueSize: o.cfg.ValueSize, Watchers: so.watchers,
			LockNames: so.lockNames, LockSessions: so.lockSessions, SessionTTL: o.cfg.SessionTTL,
		},
	}
	file := &soakResultsFile{res: res, path: so.out, out: stdout}
	fmt.Fprintf(stdout, "soak: %s\n", res.Command)
	fmt.Fprintf(stdout, "soak: %.0f puts/s over %d keys, %.0f sessions/s, %.0f lock cycles/s on %d locks, %d watchers, on each side's cell; open loop, latency from the due time; a line every %v for %v\n",
		so.putRate, so.keys, so.sessionRate, so.lockRate, so.lockNames, n*so.watchers, so.interval, so.duration)
	// Every side's cell is up before any load starts, so that no side's
	// start (etcd's members take seconds) lands in the other's first
	// minute.
	var cells []member.Cell
	stopAll := func() []error {
		errs := make([]error, len(cells))
		var wg sync.WaitGroup
		for i, c := range cells {
			wg.Go(func() {
				usage, err := c.Stop(30 * time.Second)
				errs[i] = err
				sd := res.Sides[i]
				if sd.Summary != nil {
					for _, u := range usage {
						sd.Summary.PeakRSS = append(sd.Summary.PeakRSS, u.PeakRSS)
						sd.Summary.CPUSeconds = append(sd.Summary.CPUSeconds, u.CPU.Seconds())
					}
				}
			})
		}
		wg.Wait()
		return errs
	}
	for _, side := range o.sides {
		startCtx, cancel := context.WithTimeout(ctx, time.Minute)
		// coord's members register their metrics: the soak reads the
		// log's segment cuts there.
		c, err := member.StartCell(startCtx, exe, []string{"-" + memberFlag}, side, dir, stderr,
			member.CellOptions{Env: o.memberEnv(), Scale: cell.ScaleSpec{Metrics: side == "coord"}})
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "bench: soak: %s: %v\n", side, err)
			stopAll()
			return 1
		}
		sd := &soakSide{Side: side}
		for _, p := range c {
			sd.Pids = append(sd.Pids, p.Pid())
		}
		cells = append(cells, c)
		res.Sides = append(res.Sides, sd)
		fmt.Fprintf(stdout, "soak: 3 %s member processes (pids %v) over TCP on loopback, data under %s\n", side, sd.Pids, dir)
	}
	fmt.Fprintf(stdout, "soak: %s\n", soakHeader)
	runErrs := make([]error, len(cells))
	var wg sync.WaitGroup
	for i, c := range cells {
		wg.Go(func() {
			var dirs []string
			for _, p := range c {
				dirs = append(dirs, p.Spec.Member.Dir)
			}
			runErrs[i] = soakLoop(ctx, c, dirs, so, res.Sides[i], res.Load, res.Started, file)
		})
	}
	wg.Wait()
	for i := range res.Sides {
		if sd := res.Sides[i]; len(sd.Intervals) > 0 {
			sd.Summary = summarize(sd.Intervals, sd.Summary)
		}
	}
	stopErrs := stopAll()
	failed := false
	for i, sd := range res.Sides {
		runErr := runErrs[i]
		if stopErrs[i] != nil && runErr == nil && ctx.Err() == nil {
			runErr = fmt.Errorf("stopping the members: %w", stopErrs[i])
		}
		if sd.Summary != nil {
			printSummary(stdout, sd.Side, sd.Summary)
		}
		if runErr != nil {
			failed = true
			sd.Error = runErr.Error()
			fmt.Fprintf(stderr, "bench: soak: %s: %v\n", sd.Side, runErr)
		}
	}
	res.Compare = compareSides(res.Sides)
	if res.Compare != nil {
		printCompare(stdout, res.Compare)
	}
	if err := writeJSON(so.out, res); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "soak: results in %s\n", so.out)
	if failed {
		return 1
	}
	return 0
}

// soakLoop starts the load in every process and reports every interval
// until the duration is over or ctx ends, then stops the load and
// reports the last (partial) interval. sd.Summary gets the whole run's
// latencies.
func soakLoop(ctx context.Context, c member.Cell, dirs []string, so *soakOptions, sd *soakSide, load soak.Config, started time.Time, file *soakResultsFile) error {
	callCtx := context.WithoutCancel(ctx)
	for i, p := range c {
		cfg := load
		cfg.Seed = uint64(started.UnixNano()) + uint64(i)
		if _, err := p.Call(callCtx, soak.OpStart, cfg, nil); err != nil {
			return err
		}
	}
	start := time.Now()
	last := start
	lastCPU := make([]float64, len(c))
	var total soak.Interval
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
			line.SegmentsStarted = append(line.SegmentsStarted, ivs[i].SegmentsStarted)
			line.SegmentsInline = append(line.SegmentsInline, ivs[i].SegmentsInline)
			line.DataBytes = append(line.DataBytes, dirBytes(dirs[i]))
			line.RSS = append(line.RSS, u.RSS)
			line.CPUSeconds = append(line.CPUSeconds, u.CPUSeconds)
			line.CPUPercent = append(line.CPUPercent, 100*(u.CPUSeconds-lastCPU[i])/now.Sub(last).Seconds())
			lastCPU[i] = u.CPUSeconds
		}
		last = now
		file.print("%s\n", formatInterval(sd.Side, line))
		return file.update(func() {
			sd.Intervals = append(sd.Intervals, line)
			sd.Summary = &soakSummary{PutP99Ms: ms(total.Put.Quantile(99)), PutMaxMs: ms(total.Put.Max()),
				LockP99Ms: ms(total.Lock.Quantile(99))}
		})
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
			file.print("soak: %s: interrupted\n", sd.Side)
		}
		return report(soak.OpStop)
	}
}

const soakHeader = "side  elapsed |  data MB m0/m1/m2   |  RSS MB m0/m1/m2 | CPU % m0/m1/m2 |  puts  put p50/p99/max ms | locks p99 ms | sess p99 ms | watch ev | errors | seg cuts (inline)"

// formatInterval is one side's report line (and its first error's, if
// any).
func formatInterval(side string, l soakInterval) string {
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	cuts := "-"
	if len(l.SegmentsStarted) > 0 && l.SegmentsStarted[0] >= 0 {
		var started, inline int64
		for i := range l.SegmentsStarted {
			started += l.SegmentsStarted[i]
			inline += at(l.SegmentsInline, i)
		}
		cuts = fmt.Sprintf("%d (%d)", started, inline)
	}
	line := fmt.Sprintf("%-5s %7s | %6.1f %6.1f %6.1f | %5.0f %5.0f %5.0f | %4.0f %4.0f %4.0f | %6d %5.1f/%5.1f/%6.1f | %5d %6.1f | %4d %6.1f | %8d | %6d | %s",
		side, (time.Duration(l.ElapsedSeconds) * time.Second).String(),
		mb(at(l.DataBytes, 0)), mb(at(l.DataBytes, 1)), mb(at(l.DataBytes, 2)),
		mb(at(l.RSS, 0)), mb(at(l.RSS, 1)), mb(at(l.RSS, 2)),
		at(l.CPUPercent, 0), at(l.CPUPercent, 1), at(l.CPUPercent, 2),
		l.Puts, l.PutP50Ms, l.PutP99Ms, l.PutMaxMs, l.LockCycles, l.LockP99Ms, l.Sessions, l.SessionP99Ms,
		l.WatchEvents, l.Errors, cuts)
	if l.FirstError != "" {
		line += "\n      first error: " + l.FirstError
	}
	return line
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
	// The segment counts are each member's since it opened: the last
	// line's are the run's.
	s.SegmentsStarted, s.SegmentsInline = -1, -1
	if len(last.SegmentsStarted) > 0 && last.SegmentsStarted[0] >= 0 {
		s.SegmentsStarted, s.SegmentsInline = 0, 0
		for i := range last.SegmentsStarted {
			s.SegmentsStarted += last.SegmentsStarted[i]
			s.SegmentsInline += at(last.SegmentsInline, i)
		}
	}
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

func printSummary(w io.Writer, side string, s *soakSummary) {
	mbs := func(bs []int64) string {
		var parts []string
		for _, b := range bs {
			parts = append(parts, fmt.Sprintf("%.1f", float64(b)/(1<<20)))
		}
		return strings.Join(parts, "/")
	}
	fmt.Fprintf(w, "soak summary, %s:\n", side)
	fmt.Fprintf(w, "  data dir MB by member: first interval %s, last %s, max %s\n",
		mbs(s.DataBytesFirst), mbs(s.DataBytesLast), mbs(s.DataBytesMax))
	fmt.Fprintf(w, "  put p99: worst interval %.1f ms (at %s), whole run %.1f ms, max %.1f ms; lock cycle p99 %.1f ms\n",
		s.PutP99MaxMs, time.Duration(s.PutP99MaxAt*float64(time.Second)).Round(time.Second), s.PutP99Ms, s.PutMaxMs, s.LockP99Ms)
	fmt.Fprintf(w, "  %d puts, %d lock cycles, %d sessions, %d errors\n", s.Puts, s.LockCycles, s.Sessions, s.Errors)
	if s.SegmentsStarted >= 0 {
		fmt.Fprintf(w, "  log segments started %d, of them filled on the append path %d\n", s.SegmentsStarted, s.SegmentsInline)
	}
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
