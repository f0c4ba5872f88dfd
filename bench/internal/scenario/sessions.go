package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/proc"
)

// Sessions creates cfg.Sessions sessions and measures what keeping them
// alive for cfg.KeepAlive costs.
func Sessions(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return sessions(ctx, env, cfg, cfg.Sessions, "sessions")
}

// SessionsLarge is Sessions with cfg.SessionsLarge sessions.
func SessionsLarge(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return sessions(ctx, env, cfg, cfg.SessionsLarge, "sessions-large")
}

// sessionSettle is how long the cell is left alone between creating the
// sessions and measuring, so the creations' tail (applies, the first
// keep-alives) is not counted against the keep-alive window.
const sessionSettle = time.Second

// sessions creates n sessions with cfg.SessionTTL spread over the
// members, by cfg.CreateWorkers concurrent creators, then keeps them
// alive for cfg.KeepAlive and reports: the creation rate, and how many
// were not created within cfg.CreateLimit (the rest of the figures are
// then about fewer sessions); the CPU time
// of this process (all three members and the clients keeping the
// sessions alive) during the window, in seconds and cores; the leader's
// log entries written during the window; the resident memory at its end;
// and how many sessions expired.
func sessions(ctx context.Context, env Env, cfg Config, n int, name string) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		all, took, err := createSessions(ctx, c, cfg, n)
		if err != nil {
			return nil, err
		}
		env.log("%s: created %d of %d in %v", name, len(all), n, took.Round(time.Millisecond))
		sleep(ctx, sessionSettle)

		idx0, err := c.LogIndex(ctx)
		if err != nil {
			return nil, err
		}
		cpu0, t0 := proc.CPU(), time.Now()
		sleep(ctx, cfg.KeepAlive)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cpu, window := proc.CPU()-cpu0, time.Since(t0)
		idx1, err := c.LogIndex(ctx)
		if err != nil {
			return nil, err
		}
		mem, err := proc.ReadMemory()
		if err != nil {
			return nil, err
		}
		expired := 0
		for _, s := range all {
			if s.Expired() {
				expired++
			}
		}
		env.log("%s: %d kept alive %v: %.2fs CPU, %d log entries, %d expired",
			name, len(all), window.Round(time.Millisecond), cpu.Seconds(), idx1-idx0, expired)
		label := fmt.Sprintf("%d sessions", n)
		return []Metric{
			{Name: name + ".create_rate", Label: label + ": creations", Unit: "/s", Value: float64(len(all)) / took.Seconds(), HigherIsBetter: true},
			{Name: name + ".not_created", Label: fmt.Sprintf("%s: not created within %v", label, cfg.CreateLimit),
				Unit: "sessions", Value: float64(n - len(all))},
			{Name: name + ".cpu", Label: label + ": keep-alive CPU (process)", Unit: "s", Value: cpu.Seconds()},
			{Name: name + ".cores", Label: label + ": keep-alive CPU (process)", Unit: "cores", Value: cpu.Seconds() / window.Seconds()},
			{Name: name + ".log_entries", Label: label + ": log entries while kept alive", Unit: "entries", Value: float64(idx1 - idx0)},
			{Name: name + ".rss", Label: label + ": RSS at the end", Unit: "MB", Value: mb(mem.RSS)},
			{Name: name + ".expired", Label: label + ": expired", Unit: "sessions", Value: float64(expired)},
		}, nil
	})
}

func mb(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// createSessions creates n sessions with cfg.SessionTTL, session i on
// member i%3, by cfg.CreateWorkers concurrent creators, and starts no
// more once cfg.CreateLimit has passed. It returns the sessions created and
// how long that took.
func createSessions(ctx context.Context, c cell.Cell, cfg Config, n int) ([]cell.Session, time.Duration, error) {
	all := make([]cell.Session, n)
	cctx, cancel := context.WithTimeout(ctx, cfg.CreateLimit)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, cfg.CreateWorkers)
	start := time.Now()
	for w := range cfg.CreateWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || cctx.Err() != nil {
					return
				}
				// Under ctx, not cctx: a creation abandoned at the limit
				// could still commit, and its session then expire while
				// measured.
				s, err := c.NewSession(ctx, i%cell.Members, cfg.SessionTTL)
				if err != nil {
					errs[w] = fmt.Errorf("session %d: %w", i, err)
					return
				}
				all[i] = s
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return nil, 0, fmt.Errorf("create %d sessions: %w", n, err)
	}
	return slices.DeleteFunc(all, func(s cell.Session) bool { return s == nil }), took, nil
}
