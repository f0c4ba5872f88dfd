package attack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordcell/coord"
)

// runner holds one run's cell, clients and config.
type runner struct {
	cfg     Config
	targets []Target
	addrs   []string
	victim  int
	other   int
	logf    func(string, ...any)

	writer   *coord.Client
	controls []*control // [0] through the victim's door, [1] through the other's
}

// The prefixes the attacks read, write and watch.
const (
	txnPrefix   = "bench/attack/txn/"
	bigPrefix   = "bench/attack/big/"
	fitPrefix   = "bench/attack/fit/"
	watchPrefix = "bench/attack/watch/"
)

// Run runs every attack on the cell of targets (3 members; the
// attacked one is the leader) and returns the accounting. An attack
// that fails is reported in its Result, and the next runs; Run fails
// only when the cell cannot be set up.
func Run(ctx context.Context, cfg Config, targets []Target, logf func(string, ...any)) (*Report, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if len(targets) < 2 {
		return nil, errors.New("attack: a cell of at least 2 members")
	}
	r := &runner{cfg: cfg, targets: targets, logf: logf}
	for _, t := range targets {
		a, err := t.ClientAddr(ctx)
		if err != nil {
			return nil, err
		}
		r.addrs = append(r.addrs, a)
	}
	var err error
	if r.victim, err = r.leader(ctx); err != nil {
		return nil, err
	}
	r.other = (r.victim + 1) % len(targets)
	rep := &Report{Victim: r.victim, Other: r.other}
	if r.writer, err = connect(ctx, "bench-writer", r.addrs[r.other]); err != nil {
		return nil, err
	}
	defer r.writer.Close()
	for i, m := range []int{r.victim, r.other} {
		ct, err := startControl(ctx, []string{"bench-control-victim", "bench-control-other"}[i], r.addrs[m], cfg.ControlEvery)
		if err != nil {
			return nil, err
		}
		defer ct.stop()
		r.controls = append(r.controls, ct)
	}
	logf("victim m%d (the leader), the other control through m%d", r.victim, r.other)
	if err := r.preload(ctx); err != nil {
		return nil, fmt.Errorf("preload: %w", err)
	}
	if rep.Idle, err = r.markAll(ctx); err != nil {
		return nil, err
	}
	if rep.IdleWindow, err = r.idle(ctx); err != nil {
		return nil, err
	}
	logf("idle: %s", rep.IdleWindow)
	for _, a := range r.attacks() {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		res := r.step(ctx, a)
		logf("%s", res.Summary(r.victim))
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// leader returns the index of the member that leads, waiting for one.
func (r *runner) leader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		for i, t := range r.targets {
			s, err := t.Peak(ctx)
			if err != nil {
				return -1, err
			}
			if s.Leader {
				return i, nil
			}
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return -1, fmt.Errorf("attack: no leader: %w", err)
		}
	}
}

// attackFn runs one attack and returns what it saw.
type attackFn struct {
	name, label string
	run         func(ctx context.Context) ([]Figure, error)
}

// attacks lists the attacks in the order they run: the ones that leave
// state behind (sessions, the closed member) last.
func (r *runner) attacks() []attackFn {
	c := r.cfg
	out := []attackFn{
		{"conn-flood", fmt.Sprintf("%d silent TCP connections for %v", c.Conns, c.ConnHold), r.connFlood},
		{"unread-watches", fmt.Sprintf("%d unread watches, %d puts of %d KiB", c.Watches, c.WatchPuts, c.WatchValue>>10), r.unreadWatches},
		{"prefix-reads", fmt.Sprintf("%d reads of a %d KiB prefix, unread", c.Reads, c.ReadPrefixBytes>>10),
			func(ctx context.Context) ([]Figure, error) { return r.prefixReads(ctx, bigPrefix, "reader-read") }},
		{"prefix-reads-fit", fmt.Sprintf("%d reads of a %d KiB prefix, unread", c.Reads, c.FitPrefixBytes>>10),
			func(ctx context.Context) ([]Figure, error) { return r.prefixReads(ctx, fitPrefix, "reader-read-fit") }},
		{"keepalive-frames", fmt.Sprintf("%d keep-alive frames of %d KiB of 1-byte IDs", c.KeepAliveFrames, c.KeepAliveBytes>>10), r.keepAliveFrames},
		{"read-txn", fmt.Sprintf("a txn of %d OpGetPrefix(\"\") over %d keys, no write grant", c.TxnOps, c.TxnKeys),
			func(ctx context.Context) ([]Figure, error) { return r.readTxns(ctx, 1) }},
		{"read-txn-8", fmt.Sprintf("%d such txns in a row", c.Txns),
			func(ctx context.Context) ([]Figure, error) { return r.readTxns(ctx, c.Txns) }},
		{"sessions", fmt.Sprintf("%d sessions of %v tried by one identity, abandoned", c.Sessions, c.SessionTTL), r.sessions},
	}
	if c.SpreadSessions > 0 {
		out = append(out, attackFn{"sessions-spread", fmt.Sprintf("%d sessions over %d identities, abandoned",
			c.SpreadSessions, spreadIdentities(c.SpreadSessions)), r.sessionsSpread})
	}
	return append(out, attackFn{"close-stuck", fmt.Sprintf("%d MiB of replies asked, none read, half-closed; then Node.Close", c.CloseBytes>>20), r.closeStuck})
}

// step runs a between a Mark and a Peak of every member and accounts.
func (r *runner) step(ctx context.Context, a attackFn) Result {
	res := Result{Name: a.name, Label: a.label}
	r.logf("== %s: %s", a.name, a.label)
	base, err := r.markAll(ctx)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	t0 := time.Now()
	figs, err := a.run(ctx)
	t1 := time.Now()
	res.Seconds, res.Base, res.Figures = t1.Sub(t0).Seconds(), base, figs
	if err != nil {
		res.Error = err.Error()
	}
	if res.Peak, err = r.peakAll(ctx); err != nil && res.Error == "" {
		res.Error = err.Error()
	}
	for i, ct := range r.controls {
		gap, n, errs := ct.window(t0, t1)
		res.Controls = append(res.Controls, ControlWindow{Via: []string{"victim", "other"}[i], GapSeconds: gap.Seconds(), Commits: n, Errors: errs})
	}
	sleep(ctx, r.cfg.Settle)
	return res
}

// markAll marks every member, the victim last (closest to the attack).
func (r *runner) markAll(ctx context.Context) ([]Sample, error) {
	out := make([]Sample, len(r.targets))
	for i, t := range r.targets {
		s, err := t.Mark(ctx)
		if err != nil {
			return nil, fmt.Errorf("mark m%d: %w", i, err)
		}
		out[i] = s
	}
	return out, nil
}

// peakAll reads every member's peaks.
func (r *runner) peakAll(ctx context.Context) ([]Sample, error) {
	out := make([]Sample, len(r.targets))
	for i, t := range r.targets {
		s, err := t.Peak(ctx)
		if err != nil {
			return nil, fmt.Errorf("peak m%d: %w", i, err)
		}
		out[i] = s
	}
	return out, nil
}

// idle measures a window of cfg.Idle with no attack: every member's
// CPU, and the leader's log entries beyond the controls' puts.
func (r *runner) idle(ctx context.Context) (IdleWindow, error) {
	a, err := r.peakAll(ctx)
	if err != nil {
		return IdleWindow{}, err
	}
	t0 := time.Now()
	if err := sleep(ctx, r.cfg.Idle); err != nil {
		return IdleWindow{}, err
	}
	b, err := r.peakAll(ctx)
	if err != nil {
		return IdleWindow{}, err
	}
	t1 := time.Now()
	w := IdleWindow{Seconds: t1.Sub(t0).Seconds()}
	var entries int64
	for i := range a {
		w.CPUCores = append(w.CPUCores, (b[i].CPUSeconds-a[i].CPUSeconds)/w.Seconds)
		if !b[i].Closed {
			entries = max(entries, int64(b[i].LastIndex)-int64(a[i].LastIndex))
		}
	}
	for _, ct := range r.controls {
		_, n, _ := ct.window(t0, t1)
		entries -= int64(n)
	}
	w.LogEntries = entries
	return w, nil
}

// String summarizes the window.
func (w IdleWindow) String() string {
	return fmt.Sprintf("%.1fs, CPU cores %.3f, log entries beyond the controls' %d", w.Seconds, w.CPUCores, w.LogEntries)
}

// Summary is a line of the result for the log.
func (res *Result) Summary(victim int) string {
	s := fmt.Sprintf("%s: %.1fs", res.Name, res.Seconds)
	for i := range res.Peak {
		if i < len(res.Base) {
			s += fmt.Sprintf("; m%d RSS %+.0f heap %+.0f MiB", i, mib(res.Peak[i].RSS-res.Base[i].RSS), mib(res.Peak[i].Heap-res.Base[i].Heap))
		}
	}
	for _, c := range res.Controls {
		s += fmt.Sprintf("; gap via %s %.0f ms (%d errors)", c.Via, c.GapSeconds*1000, c.Errors)
	}
	if victim < len(res.Peak) && victim < len(res.Base) {
		d := res.DoorDelta(victim)
		s += fmt.Sprintf("; victim door refused %d cut slow %d idle %d", d.Refused, d.CutSlow, d.CutIdle)
	}
	for _, f := range res.Figures {
		s += fmt.Sprintf("; %s %g", f.Name, f.Value)
	}
	if res.Error != "" {
		s += "; ERROR " + res.Error
	}
	return s
}

// DoorDelta is member m's door counters at the end less those at the
// start (the gauges, Admitted, Pending and QueuedBytes, as at the end;
// QueuedPeak is since Open).
func (res *Result) DoorDelta(m int) Door {
	a, b := res.Base[m].Door, res.Peak[m].Door
	b.Refused -= a.Refused
	b.CutSlow -= a.CutSlow
	b.CutIdle -= a.CutIdle
	return b
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
