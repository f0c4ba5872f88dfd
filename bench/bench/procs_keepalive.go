package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/member"
	"github.com/coordcell/coord/bench/internal/scenario"
)

// keepAliveSettle is how long the cell is left alone between creating
// the sessions and measuring (as the sessions scenario's settle).
const keepAliveSettle = time.Second

// procsKeepAlive is the sessions scenario with one member per process:
// what keeping sessions alive costs each member process, as CPU per
// session per keep-alive interval. Every process first measures its CPU
// over an idle window (-duration: heartbeats, ticks), then creates its
// third of -sessions sessions (TTL -session-ttl) on its own member, and
// measures its CPU over -keepalive; the keep-alive cost is the window's
// CPU less the idle rate's share, per session.
func procsKeepAlive(ctx context.Context, c member.Cell, cfg *scenario.Config, logf func(string, ...any)) ([]scenario.Metric, error) {
	windows := func(d time.Duration) ([]scenario.KeepAliveWindow, error) {
		return callAll[scenario.KeepAliveWindow](ctx, c, opKeepAliveWindow, func(int) any { return d })
	}
	idle, err := windows(cfg.Duration)
	if err != nil {
		return nil, fmt.Errorf("idle window: %w", err)
	}
	n := cfg.Sessions
	created, err := callAll[scenario.KeepAliveCreated](ctx, c, opKeepAliveCreate, func(p int) any {
		return scenario.KeepAliveShare{Sessions: (n - p + len(c) - 1) / len(c), Workers: max(1, cfg.CreateWorkers/len(c)), TTL: cfg.SessionTTL}
	})
	if err != nil {
		return nil, fmt.Errorf("create the sessions: %w", err)
	}
	sleepUntil(ctx, time.Now().Add(keepAliveSettle))
	win, err := windows(cfg.KeepAlive)
	if err != nil {
		return nil, fmt.Errorf("keep-alive window: %w", err)
	}
	leads, err := callAll[bool](ctx, c, opLeads, func(int) any { return nil })
	if err != nil {
		return nil, err
	}
	total, expired := 0, 0
	createSecs := 0.0
	for p := range c {
		total += created[p].Created
		expired += win[p].Expired
		createSecs = max(createSecs, created[p].Seconds)
	}
	if total == 0 {
		return nil, errors.New("no session created")
	}
	// keepAlive is process p's CPU over the window beyond its idle rate.
	keepAlive := func(p int) float64 {
		return win[p].CPUSeconds - idle[p].CPUSeconds/idle[p].Seconds*win[p].Seconds
	}
	var sum, idleCores, cores float64
	leaderCPU := -1.0
	for p := range c {
		sum += keepAlive(p)
		idleCores += idle[p].CPUSeconds / idle[p].Seconds
		cores += win[p].CPUSeconds / win[p].Seconds
		if leads[p] {
			leaderCPU = keepAlive(p)
		}
	}
	secs := win[0].Seconds
	perSecond := sum * 1e6 / float64(total) / secs
	divisor := scenario.CoordKeepAliveDivisor
	if c[0].Spec.Side == "etcd" {
		divisor = scenario.EtcdKeepAliveDivisor
	}
	interval := cfg.SessionTTL / time.Duration(divisor)
	logf("%d sessions kept alive %v: %.3f cores (idle %.3f), %.2f µs CPU per session per second, %.1f per interval of %v; %d expired",
		total, cfg.KeepAlive, cores, idleCores, perSecond, perSecond*interval.Seconds(), interval, expired)
	label := fmt.Sprintf("%d sessions of %v, 3 procs", n, cfg.SessionTTL)
	out := []scenario.Metric{
		{Name: "sessions.keepalive.created", Label: label + ": created", Unit: "sessions", Value: float64(total)},
		{Name: "sessions.keepalive.create_rate", Label: label + ": creations", Unit: "/s", Value: float64(total) / createSecs, HigherIsBetter: true},
		{Name: "sessions.keepalive.expired", Label: label + ": expired while kept alive", Unit: "sessions", Value: float64(expired)},
		{Name: "sessions.keepalive.idle_cores", Label: label + ": CPU of the 3 member processes before the sessions", Unit: "cores", Value: idleCores},
		{Name: "sessions.keepalive.cores", Label: label + ": CPU of the 3 member processes while kept alive", Unit: "cores", Value: cores},
		{Name: "sessions.keepalive.us_per_s", Label: label + ": keep-alive CPU per session per second, 3 member processes (over idle)",
			Unit: "µs", Value: perSecond},
		{Name: "sessions.keepalive.us_per_interval", Label: fmt.Sprintf("%s: keep-alive CPU per session per interval (coord TTL/%d, etcd TTL/%d)",
			label, scenario.CoordKeepAliveDivisor, scenario.EtcdKeepAliveDivisor), Unit: "µs", Value: perSecond * interval.Seconds()},
	}
	if leaderCPU >= 0 {
		out = append(out, scenario.Metric{Name: "sessions.keepalive.us_per_s.leader",
			Label: label + ": keep-alive CPU per session per second, the leader's process (over idle)", Unit: "µs",
			Value: leaderCPU * 1e6 / float64(total) / secs})
	}
	return out, nil
}

// callAll calls op on every process at once, process p with body(p), and
// returns their answers by process.
func callAll[T any](ctx context.Context, c member.Cell, op string, body func(p int) any) ([]T, error) {
	outs := make([]T, len(c))
	errs := make([]error, len(c))
	var wg sync.WaitGroup
	for p, pr := range c {
		wg.Go(func() { _, errs[p] = pr.Call(ctx, op, body(p), &outs[p]) })
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}
