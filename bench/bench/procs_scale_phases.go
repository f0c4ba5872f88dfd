package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/scale"
	"github.com/coordcell/coord/bench/internal/scenario"
)

// The phases of the scale scenario that run on the loaded cell as it
// stands: the load, memory, load points, the paged list and the watch
// from far back. procs_scale_members.go has those that change the
// cell's processes, the clients and the quota.

// scalePoint is one load point of the scale scenario.
type scalePoint struct {
	name, label, unit string
	kind              string
	workers           int
}

// scalePoints are the points run on the empty cell, the loaded one, and
// (the put) under the memory limit.
func (r *scaleRun) scalePoints() []scalePoint {
	cfg := &r.o.cfg
	return []scalePoint{
		{"put", fmt.Sprintf("put %dB, %d callers", cfg.ValueSize, r.s.PutClients), "ops/s", scenario.LoadPut, r.s.PutClients},
		{"get", fmt.Sprintf("get linearizable, %d callers", cfg.GetClients), "ops/s", scenario.LoadGetLinearizable, cfg.GetClients},
		{"lock", fmt.Sprintf("lock+unlock uncontended, %d holders", cfg.LockHolders), "cycles/s", scenario.LoadLockUncontended, cfg.LockHolders},
	}
}

// runPoints runs points, each spread over the processes, and adds their
// rate, p99 and CPU per operation under tag ("empty", "loaded"...).
func (r *scaleRun) runPoints(ctx context.Context, tag, state string, points []scalePoint) (map[string]procsResult, error) {
	cfg := &r.o.cfg
	out := map[string]procsResult{}
	for _, p := range points {
		stop, err := r.startProfiles(ctx, tag+"-"+p.name)
		if err != nil {
			return out, err
		}
		res, err := spread(ctx, r.c, scenario.MemberLoad{Kind: p.kind, Workers: p.workers, Warmup: cfg.Warmup,
			Duration: cfg.Duration, ValueSize: cfg.ValueSize, Keys: cfg.GetKeys})
		if perr := stop(); err == nil {
			err = perr
		}
		if err != nil {
			return out, fmt.Errorf("%s %s: %w", tag, p.name, err)
		}
		r.logf("%s: %s %.0f %s, p99 %.1f ms, %.0f µs CPU per op", tag, p.label, res.rate(), p.unit,
			ms(res.lat.Quantile(99)), res.cpuPerOp(res.cpu))
		l := p.label + ", " + state
		r.add(tag+"."+p.name+".rate", l+": throughput", p.unit, res.rate(), true)
		r.add(tag+"."+p.name+".p99", l+": p99", "ms", ms(res.lat.Quantile(99)), false)
		r.add(tag+"."+p.name+".cpu_us", l+": CPU per op, 3 member processes", "µs", res.cpuPerOp(res.cpu), false)
		if res.errs > 0 {
			r.add(tag+"."+p.name+".errors", l+": errors", "ops", float64(res.errs), false)
		}
		out[p.name] = res
	}
	return out, nil
}

// startProfiles starts a CPU profile in every member process into
// -profile's directory (side-scale-<name>-m<i>.cpu.pprof), when it is
// set; the function it returns stops them.
func (r *scaleRun) startProfiles(ctx context.Context, name string) (func() error, error) {
	if r.o.profileDir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(r.o.profileDir, 0o755); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(r.o.profileDir)
	if err != nil {
		return nil, err
	}
	if _, err := scaleEach[struct{}](ctx, r, scale.OpProfile, func(i int) any {
		return filepath.Join(dir, fmt.Sprintf("%s-scale-%s-m%d.cpu.pprof", r.side, name, i))
	}); err != nil {
		return nil, err
	}
	return func() error {
		_, err := scaleEach[struct{}](ctx, r, scale.OpProfile, func(int) any { return "" })
		return err
	}, nil
}

// addMems adds each member's memory under tag, against the live data
// loaded, and the largest ratio. A member's RSS is compared with what it
// holds: every member holds the whole keyspace.
func (r *scaleRun) addMems(tag, state string, ms []scale.Mem) { r.addMemsOf(tag, state, ms, r.live) }

// addMemsOf is addMems against live bytes of data.
func (r *scaleRun) addMemsOf(tag, state string, ms []scale.Mem, live int64) {
	maxRSS, maxHeap := 0.0, 0.0
	for i, m := range ms {
		l := fmt.Sprintf("%s, m%d", state, i)
		if m.Status.Leader {
			l += " (leader)"
		}
		p := fmt.Sprintf("%s.m%d.", tag, i)
		// RSS counts the file pages mapped too: the binary's (about 40 MB
		// of this one, etcd's code included) and etcd's database.
		r.add(p+"rss", l+": RSS", "MB", mb(m.RSS), false)
		r.add(p+"peak_rss", l+": peak RSS so far (VmHWM; a restarted process's own)", "MB", mb(m.PeakRSS), false)
		r.add(p+"rss_file", l+": RSS, of it file pages (the binary; etcd's database)", "MB", mb(m.RSSFile), false)
		if m.HeapLive > 0 {
			r.add(p+"heap_live", l+": Go heap live (after a GC)", "MB", mb(m.HeapLive), false)
		}
		if live > 0 {
			rr := float64(m.RSS) / float64(live)
			r.add(p+"rss_ratio", l+": RSS / live data", "x", rr, false)
			maxRSS = max(maxRSS, rr)
			if m.HeapLive > 0 {
				maxHeap = max(maxHeap, float64(m.HeapLive)/float64(live))
			}
		}
	}
	if live > 0 {
		r.add(tag+".rss_ratio.max", state+": RSS / live data, the largest of the members", "x", maxRSS, false)
		if maxHeap > 0 {
			r.add(tag+".heap_ratio.max", state+": Go heap live / live data, the largest of the members", "x", maxHeap, false)
		}
	}
}

// phaseEmpty takes each member's memory on the empty cell and runs the
// load points on it (the get's keys written first, as the get scenario
// does).
func (r *scaleRun) phaseEmpty(ctx context.Context) error {
	ms, err := r.mems(ctx, true)
	if err != nil {
		return err
	}
	r.addMems("empty", "empty cell", ms)
	cfg := &r.o.cfg
	if err := preloadProcs(ctx, r.c, scenario.MemberLoad{Kind: scenario.LoadPreload, Keys: cfg.GetKeys, ValueSize: cfg.ValueSize}); err != nil {
		return err
	}
	res, err := r.runPoints(ctx, "empty", "empty cell", r.scalePoints())
	r.empty = res
	return err
}

// phaseLoad loads the keys: each process a third of them, in
// transactions of -scale-batch keys, -scale-load-writers at a time.
func (r *scaleRun) phaseLoad(ctx context.Context) error {
	n := r.s.Keys
	per := (n + len(r.c) - 1) / len(r.c)
	start := time.Now()
	res, err := scaleEach[scale.LoadResult](ctx, r, scale.OpLoad, func(i int) any {
		return scale.Load{Prefix: scaleLoadPrefix, From: i * per, To: min(n, (i+1)*per), Batch: r.s.Batch,
			Writers: r.s.LoadWriters, ValueSize: r.s.ValueSize}
	})
	took := time.Since(start).Seconds()
	if err != nil {
		return err
	}
	keys, retries := 0, 0
	for _, lr := range res {
		keys += lr.Keys
		retries += lr.Retries
	}
	r.live = int64(keys) * int64(scale.KeyLen(scaleLoadPrefix)+r.s.ValueSize)
	r.logf("loaded %d keys (%.0f MB of keys and values) in %.1f s: %.0f keys/s, %.1f MB/s, %d batches written again",
		keys, mb(r.live), took, float64(keys)/took, mb(r.live)/took, retries)
	r.add("live_data", fmt.Sprintf("live data loaded: %d keys of %d B (keys and values)", keys, r.s.ValueSize), "MB", mb(r.live), false)
	r.add("load.seconds", fmt.Sprintf("load, transactions of %d keys, %d in flight per process", r.s.Batch, r.s.LoadWriters), "s", took, false)
	r.add("load.rate", "load: keys per second", "keys/s", float64(keys)/took, true)
	r.add("load.mbps", "load: live data per second", "MB/s", mb(r.live)/took, true)
	if retries > 0 {
		r.add("load.retries", "load: batches written again after an error", "batches", float64(retries), false)
	}
	return nil
}

// caughtUp waits until every member has applied what the leader had
// committed when it was asked, so the figures that follow are of the
// whole state.
func (r *scaleRun) caughtUp(ctx context.Context) error {
	leader, _, err := r.leader(ctx)
	if err != nil {
		return err
	}
	var st cell.ScaleStatus
	if err := r.call(ctx, leader, scale.OpStatus, nil, &st); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		sts, err := scaleEach[cell.ScaleStatus](ctx, r, scale.OpStatus, func(int) any { return nil })
		if err != nil {
			return err
		}
		behind := 0
		for _, s := range sts {
			if s.Applied < st.Commit {
				behind++
			}
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d members had not applied index %d after 5 minutes", behind, st.Commit)
		}
		sleepUntil(ctx, time.Now().Add(200*time.Millisecond))
	}
}

// phaseLoadedMemory takes each member's memory and data directory at
// rest after the load.
func (r *scaleRun) phaseLoadedMemory(ctx context.Context) error {
	if err := r.caughtUp(ctx); err != nil {
		return err
	}
	ms, err := r.mems(ctx, true)
	if err != nil {
		return err
	}
	r.addMems("rest", "loaded, at rest after the load", ms)
	largest := 0.0
	for i, p := range r.c {
		d := mb(dirBytes(p.Spec.Member.Dir))
		largest = max(largest, d)
		r.add(fmt.Sprintf("rest.m%d.data_dir", i), fmt.Sprintf("loaded, m%d: data directory", i), "MB", d, false)
		r.logf("m%d: RSS %.0f MB (%.2fx the live data), heap live %.0f MB, data dir %.0f MB", i, mb(ms[i].RSS),
			float64(ms[i].RSS)/float64(r.live), mb(ms[i].HeapLive), d)
	}
	r.add("rest.data_dir.max", "loaded: data directory, the largest of the members", "MB", largest, false)
	return nil
}

// phaseLoadedPoints runs the load points on the loaded cell, compares
// their p99 with the empty cell's, and takes each member's memory as it
// serves them.
func (r *scaleRun) phaseLoadedPoints(ctx context.Context) error {
	res, err := r.runPoints(ctx, "loaded", fmt.Sprintf("%.0f MB loaded", mb(r.live)), r.scalePoints())
	if err != nil {
		return err
	}
	for name, l := range res {
		e, ok := r.empty[name]
		if !ok || e.lat.Quantile(99) <= 0 {
			continue
		}
		r.add(name+".p99_loaded_over_empty", name+": p99 loaded / p99 on the empty cell", "x",
			float64(l.lat.Quantile(99))/float64(e.lat.Quantile(99)), false)
	}
	ms, err := r.mems(ctx, true)
	if err != nil {
		return err
	}
	r.addMems("loaded", "loaded, after its load points (default GC"+r.memberLimitNote()+")", ms)
	return nil
}

// The members are idle when each process used less than settleIdle of
// a core over settleWindow: their heartbeats and tickers, no
// compaction.
const (
	settleWindow = 2 * time.Second
	settleIdle   = 0.05
)

// phaseSettledPoints waits, at most -scale-settle, until every member
// process is idle (coord's compactions of the load, which puts just after
// it share the CPU with, are done), then runs the put point again: the
// p99 at the loaded size of a cell at rest, beside the one just after
// the load.
func (r *scaleRun) phaseSettledPoints(ctx context.Context) error {
	if r.s.Settle <= 0 {
		return nil
	}
	start := time.Now()
	cpu := func() ([]float64, error) {
		out := make([]float64, len(r.c))
		for i, p := range r.c {
			u, err := p.Call(ctx, scale.OpStatus, nil, nil)
			if err != nil {
				return nil, err
			}
			out[i] = u.CPUSeconds
		}
		return out, nil
	}
	prev, err := cpu()
	if err != nil {
		return err
	}
	settled := false
	for !settled && time.Since(start) < r.s.Settle {
		sleepUntil(ctx, time.Now().Add(settleWindow))
		if err := ctx.Err(); err != nil {
			return err
		}
		now, err := cpu()
		if err != nil {
			return err
		}
		settled = true
		for i := range now {
			if (now[i]-prev[i])/settleWindow.Seconds() >= settleIdle {
				settled = false
			}
		}
		prev = now
	}
	took := time.Since(start).Seconds()
	if settled {
		r.logf("members idle %.1f s after the loaded points", took)
		r.add("settle.seconds", "after the loaded points: until every member process was idle", "s", took, false)
	} else {
		r.logf("members not idle after %v: the put point runs anyway", r.s.Settle)
		r.add("settle.seconds", fmt.Sprintf("after the loaded points: members not idle within %v", r.s.Settle), "s", took, false)
	}
	points := r.scalePoints()[:1]
	res, err := r.runPoints(ctx, "settled", fmt.Sprintf("%.0f MB loaded, settled", mb(r.live)), points)
	if err != nil {
		return err
	}
	if l, e := res[points[0].name], r.empty[points[0].name]; e.lat.Quantile(99) > 0 {
		r.add(points[0].name+".p99_settled_over_empty", points[0].name+": p99 loaded and settled / p99 on the empty cell", "x",
			float64(l.lat.Quantile(99))/float64(e.lat.Quantile(99)), false)
	}
	return nil
}

// memberLimitNote names the members' GOMEMLIMIT, when they run with one.
func (r *scaleRun) memberLimitNote() string {
	if r.o.memberGoMemLimit == "" {
		return ""
	}
	return ", GOMEMLIMIT=" + r.o.memberGoMemLimit
}

// phaseMemLimit sets the memory limit in every member, runs the put and
// get points under it, takes each member's memory, and lifts the limit
// again (the growth to the cap would otherwise run the GC without end).
func (r *scaleRun) phaseMemLimit(ctx context.Context) error {
	limit, on, err := r.s.memLimit(r.live)
	if err != nil || !on {
		return err
	}
	r.logf("memory limit %.0f MB in every member (%s)", mb(limit), r.s.GoMemLimit)
	if _, err := scaleEach[int64](ctx, r, scale.OpMemLimit, func(int) any { return limit }); err != nil {
		return err
	}
	state := fmt.Sprintf("under a memory limit of %.0f MB (%s the live data)", mb(limit), r.s.GoMemLimit)
	r.add("memlimit.limit", "memory limit set in each member (debug.SetMemoryLimit, as GOMEMLIMIT)", "MB", mb(limit), false)
	if _, err := r.runPoints(ctx, "memlimit", state, r.scalePoints()[:2]); err != nil {
		return err
	}
	ms, err := r.mems(ctx, true)
	if err != nil {
		return err
	}
	r.addMems("memlimit", "loaded, "+state+", after its load points", ms)
	_, err = scaleEach[int64](ctx, r, scale.OpMemLimit, func(int) any { return int64(-1) })
	return err
}

// phaseList lists -scale-list keys on a follower, page by page.
func (r *scaleRun) phaseList(ctx context.Context) error {
	n := min(r.s.ListKeys, r.s.Keys)
	if n < 1 {
		return nil
	}
	_, f, err := r.leader(ctx)
	if err != nil {
		return err
	}
	var res scale.ListResult
	if err := r.call(ctx, f, scale.OpList, scale.ListRequest{Prefix: scaleLoadPrefix, Keys: n, Page: r.s.ListPage}, &res); err != nil {
		return err
	}
	r.logf("list of %d keys on m%d in %d pages: %.2f s, heap +%.0f MB, RSS +%.0f MB at most", res.Keys, f, res.Pages,
		res.Seconds, mb(res.HeapPeak-res.HeapBase), mb(res.RSSPeak-res.RSSBase))
	l := fmt.Sprintf("List of %d keys on a follower, pages of %d", res.Keys, r.s.ListPage)
	r.add("list.seconds", l+": time", "s", res.Seconds, false)
	r.add("list.rate", l+": keys per second", "keys/s", float64(res.Keys)/res.Seconds, true)
	r.add("list.page_p99", l+": p99 of a page", "ms", res.PageP99Ms, false)
	r.add("list.heap_peak", l+": the member's peak Go heap over its start", "MB", mb(res.HeapPeak-res.HeapBase), false)
	r.add("list.rss_peak", l+": the member's peak RSS over its start", "MB", mb(res.RSSPeak-res.RSSBase), false)
	return nil
}

// phaseWatch writes -scale-watch-back single puts, then watches on a
// follower from the revision before them and times the replay.
func (r *scaleRun) phaseWatch(ctx context.Context) error {
	n := r.s.WatchBack
	if n < 1 {
		return nil
	}
	leader, f, err := r.leader(ctx)
	if err != nil {
		return err
	}
	var pr scale.PutsResult
	if err := r.call(ctx, leader, scale.OpPuts, scale.PutsRequest{Prefix: scaleWatchPrefix, Count: n, Workers: 64,
		ValueSize: r.o.cfg.ValueSize}, &pr); err != nil {
		return err
	}
	r.add("watch.puts_rate", fmt.Sprintf("%d single puts of %d B before the watch, 64 callers: throughput", n, r.o.cfg.ValueSize),
		"ops/s", float64(n)/pr.Seconds, true)
	from := pr.MaxRev - int64(n)
	var res scale.WatchFromResult
	if err := r.call(ctx, f, scale.OpWatchFrom, scale.WatchFromRequest{Prefix: scaleWatchPrefix, AfterRev: from,
		UntilRev: pr.MaxRev, Limit: 5 * time.Minute}, &res); err != nil {
		return err
	}
	r.logf("watch from %d changes back on m%d: %d events, first after %.1f ms, all after %.2f s %s", n, f, res.Events,
		res.FirstSeconds*1000, res.Seconds, res.Error)
	l := fmt.Sprintf("watch on a follower from %d changes back", n)
	r.add("watch.events", l+": events received", "events", float64(res.Events), false)
	r.add("watch.first_ms", l+": first event", "ms", res.FirstSeconds*1000, false)
	if res.Error != "" {
		r.add("watch.failed", l+": FAILED: "+res.Error, "", 1, false)
		return nil
	}
	r.add("watch.seconds", l+": time to the last", "s", res.Seconds, false)
	r.add("watch.rate", l+": events per second", "events/s", float64(res.Events)/res.Seconds, true)
	r.add("watch.heap_peak", l+": the member's peak Go heap over its start", "MB", mb(res.HeapPeak-res.HeapBase), false)
	return nil
}
