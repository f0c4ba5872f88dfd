package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/coordcell"
	"github.com/coordcell/coord/bench/internal/etcdcell"
	"github.com/coordcell/coord/bench/internal/member"
	"github.com/coordcell/coord/bench/internal/proc"
	"github.com/coordcell/coord/bench/internal/scale"
)

// The phases of the scale scenario that change the cell's processes (a
// restart, a new member), hold sessions and watches through clients, and
// grow the cell to its cap.

// mb converts bytes to MiB, the bench's MB.
func mb(b int64) float64 { return float64(b) / (1 << 20) }

// memberStartLimit bounds a member process's start, from its exec to its
// first answer: a restarted member reads its state back, a joining one
// may wait for its snapshot.
const memberStartLimit = 10 * time.Minute

// addUsage keeps what an ended process used, for process index i's
// totals.
func (r *scaleRun) addUsage(i int, u proc.Usage) {
	e := r.usage[i]
	e.CPU += u.CPU
	e.PeakRSS = max(e.PeakRSS, u.PeakRSS)
	r.usage[i] = e
}

// phaseRestart kills a follower's process (kill -9), starts it again on
// its data directory and addresses, and times it from the kill to its
// member's serving a linearizable read.
func (r *scaleRun) phaseRestart(ctx context.Context) error {
	_, f, err := r.leader(ctx)
	if err != nil {
		return err
	}
	old := r.c[f]
	start := time.Now()
	if err := old.Kill(); err != nil {
		return err
	}
	u, _ := old.Stop(10 * time.Second)
	r.addUsage(f, u)
	exited := time.Since(start)
	p, err := member.Start(r.exe, []string{"-" + memberFlag}, old.Spec, r.stderr, r.o.memberEnv()...)
	if p != nil {
		r.c[f] = p
	}
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, memberStartLimit)
	defer cancel()
	if _, err := p.Ready(rctx); err != nil {
		return fmt.Errorf("restarted m%d: %w", f, err)
	}
	ready := time.Since(start)
	var g scale.GetResult
	if err := r.call(ctx, f, scale.OpGet, scale.Key(scaleLoadPrefix, 0), &g); err != nil {
		return fmt.Errorf("restarted m%d's first linearizable get: %w", f, err)
	}
	serving := time.Since(start)
	info := p.ReadyInfo()
	r.logf("m%d restarted: exited %v after the kill, opened in %.2f s, a write committed through it %.2f s later, "+
		"a linearizable read served %.2f s after the kill", f, exited.Round(time.Millisecond), info.OpenSeconds, info.AwaitSeconds,
		serving.Seconds())
	l := fmt.Sprintf("restart of a follower after kill -9 (%.0f MB loaded)", mb(r.live))
	r.add("restart.serving", l+": kill to a linearizable read served", "s", serving.Seconds(), false)
	r.add("restart.ready", l+": kill to a write committed through it", "s", ready.Seconds(), false)
	r.add("restart.open", l+": the member's open (its state read back)", "s", info.OpenSeconds, false)
	return nil
}

// phaseJoin adds a fourth member as a learner, starts its process on an
// empty data directory, and times it until it has applied what the
// leader had committed when it was added: with the log compacted, that
// is a snapshot's install. Then it removes it again.
func (r *scaleRun) phaseJoin(ctx context.Context) error {
	leader, _, err := r.leader(ctx)
	if err != nil {
		return err
	}
	addrs, err := cell.FreeAddrs(2)
	if err != nil {
		return err
	}
	base := r.c[0].Spec
	idx := len(r.c)
	spec := member.Spec{Side: r.side, Member: cell.MemberSpec{
		Index: idx, PeerAddrs: append(slices.Clone(base.Member.PeerAddrs), addrs[0]),
		ClientAddrs: append(slices.Clone(base.Member.ClientAddrs), addrs[1]),
		Dir:         filepath.Join(r.dir, fmt.Sprintf("%s-m%d", r.side, idx)), Join: true, Scale: base.Member.Scale,
	}}
	name := cell.MemberName(r.side, idx)
	mship := scale.Membership{Name: name, PeerAddr: addrs[0]}
	// etcd refuses a member change until every member has been connected
	// a while ("unhealthy cluster": the restart just before): again, for
	// a minute at most.
	for deadline := time.Now().Add(time.Minute); ; {
		err := r.call(ctx, leader, scale.OpAddLearner, mship, nil)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") || time.Now().After(deadline) {
			return err
		}
		sleepUntil(ctx, time.Now().Add(500*time.Millisecond))
	}
	var st cell.ScaleStatus
	if err := r.call(ctx, leader, scale.OpStatus, nil, &st); err != nil {
		return err
	}
	// Writes go on, 10 a second, as in a live cell: an etcd member that
	// has installed a snapshot reports its applied index only once it
	// applies an entry after it (and refuses its own start until then).
	if err := r.call(ctx, leader, scale.OpTrickle, scale.Trickle{Key: "scale/trickle", Every: 100 * time.Millisecond}, nil); err != nil {
		return err
	}
	defer func() {
		var failed int64
		if err := r.call(ctx, leader, scale.OpTrickle, scale.Trickle{}, &failed); err == nil && failed > 0 {
			r.logf("%d of the writes during the join failed", failed)
		}
	}()
	start := time.Now()
	p, err := member.Start(r.exe, []string{"-" + memberFlag}, spec, r.stderr, r.o.memberEnv()...)
	defer func() {
		if p != nil {
			u, _ := p.Stop(30 * time.Second)
			r.addUsage(idx, u)
		}
	}()
	if err != nil {
		return err
	}
	jctx, cancel := context.WithTimeout(ctx, memberStartLimit)
	defer cancel()
	if _, err := p.Ready(jctx); err != nil {
		return fmt.Errorf("joining member: %w", err)
	}
	for {
		var js cell.ScaleStatus
		if _, err := p.Call(jctx, scale.OpStatus, nil, &js); err != nil {
			return fmt.Errorf("joining member: %w", err)
		}
		if js.Applied >= st.Commit {
			break
		}
		sleepUntil(jctx, time.Now().Add(50*time.Millisecond))
		if jctx.Err() != nil {
			return fmt.Errorf("joining member had not applied index %d within %v", st.Commit, memberStartLimit)
		}
	}
	took := time.Since(start)
	dir := dirBytes(spec.Member.Dir)
	r.logf("a new member caught up with index %d in %.2f s (%.0f MB/s of live data), data dir %.0f MB",
		st.Commit, took.Seconds(), mb(r.live)/took.Seconds(), mb(dir))
	l := fmt.Sprintf("a new member's catch-up (%.0f MB loaded; a snapshot once the log is compacted)", mb(r.live))
	r.add("join.seconds", l+": process start to applied", "s", took.Seconds(), false)
	r.add("join.mbps", l+": live data per second", "MB/s", mb(r.live)/took.Seconds(), true)
	r.add("join.data_dir", l+": its data directory then", "MB", mb(dir), false)
	if err := r.call(ctx, leader, scale.OpRemove, mship, nil); err != nil {
		return fmt.Errorf("remove the new member: %w", err)
	}
	return nil
}

// phaseHold holds -scale-sessions sessions and -scale-watches watches
// through -scale-clients clients for -scale-hold, and takes what the
// members spend on them.
func (r *scaleRun) phaseHold(ctx context.Context) error {
	if r.s.Sessions+r.s.Watches == 0 {
		return nil
	}
	before, err := r.mems(ctx, true)
	if err != nil {
		return err
	}
	addrs := r.c[0].Spec.Member.ClientAddrs[:len(r.c)]
	dial := func(ctx context.Context, i int) (cell.Client, error) {
		a := addrs[i%len(addrs)]
		if r.side == "coord" {
			return coordcell.Dial(ctx, a, fmt.Sprintf("scale-c%04d", i))
		}
		return etcdcell.Dial(ctx, "http://"+a, fmt.Sprintf("scale-c%04d", i))
	}
	cfg := &r.o.cfg
	// With -profile, the members and this process (the clients) are
	// profiled from the sessions' creation to the end of the hold, and
	// again over the sessions' closes.
	stopProfiles, err := r.startHoldProfiles(ctx, "hold")
	if err != nil {
		return err
	}
	defer func() { _ = stopProfiles() }()
	hc := scale.HoldConfig{Clients: r.s.Clients, Sessions: r.s.Sessions, Watches: r.s.Watches, TTL: cfg.SessionTTL,
		Workers: cfg.ClientCreateWorkers, CreateLimit: cfg.ClientCreateLimit, Probes: min(100, r.s.Watches)}
	h, err := scale.StartHold(ctx, hc, dial)
	if err != nil {
		return err
	}
	defer h.Close()
	r.logf("%d clients: %d sessions in %.1f s (%d failed: %s), %d watches in %.1f s (%d failed: %s)", r.s.Clients,
		h.Sessions(), h.SessionsSeconds, h.SessionsFailed, h.SessionError, h.WatchesHeld, h.WatchesSeconds, h.WatchesFailed, h.WatchError)
	if (r.s.Sessions > 0 && h.Sessions() == 0) || (r.s.Watches > 0 && h.WatchesHeld == 0) {
		return fmt.Errorf("no session created (%s) or no watch held (%s)", h.SessionError, h.WatchError)
	}
	l := fmt.Sprintf("%d sessions (TTL %v) and %d watches through %d clients", r.s.Sessions, cfg.SessionTTL, r.s.Watches, r.s.Clients)
	r.add("hold.sessions", l+": sessions created", "sessions", float64(h.Sessions()), false)
	r.add("hold.sessions_rate", l+": session creations per second", "/s", float64(h.Sessions())/h.SessionsSeconds, true)
	r.add("hold.watches", l+": watches held", "watches", float64(h.WatchesHeld), false)
	if h.WatchesSeconds > 0 {
		r.add("hold.watches_rate", l+": watch creations per second", "/s", float64(h.WatchesHeld)/h.WatchesSeconds, true)
	}
	created, createdClients := h.Expired()
	r.add("hold.expired_created", l+": sessions expired by the end of the watches' creation", "sessions", float64(created), false)
	r.add("hold.expired_created_clients", l+": clients holding those", "clients", float64(createdClients), false)
	start, err := r.mems(ctx, false)
	if err != nil {
		return err
	}
	sleepUntil(ctx, time.Now().Add(r.s.Hold))
	if err := ctx.Err(); err != nil {
		return err
	}
	end, err := r.mems(ctx, false)
	if err != nil {
		return err
	}
	expired, expiredClients := h.Expired()
	probe := h.Probe(ctx, 10*time.Second)
	held, err := r.mems(ctx, true)
	if err != nil {
		return err
	}
	r.logf("held %v: %d sessions expired (%d by the end of the watches' creation), on %d clients; %d of %d probed watches delivered a put (slowest %.1f ms)",
		r.s.Hold, expired, created, expiredClients, probe.Delivered, probe.Probes, probe.MaxMs)
	r.add("hold.expired", fmt.Sprintf("%s: sessions expired in the %v held", l, r.s.Hold), "sessions", float64(expired), false)
	r.add("hold.expired_clients", l+": clients holding those", "clients", float64(expiredClients), false)
	r.add("hold.probes", fmt.Sprintf("%s: of %d watches read, those a put reached within 10 s", l, probe.Probes), "watches",
		float64(probe.Delivered), true)
	r.add("hold.probe_max", l+": the slowest of those puts to its event", "ms", probe.MaxMs, false)
	for i := range r.c {
		if i >= len(before) || i >= len(held) || i >= len(start) || i >= len(end) {
			break
		}
		m := fmt.Sprintf("hold.m%d.", i)
		li := fmt.Sprintf("%s, m%d", l, i)
		if held[i].Status.Leader {
			li += " (leader)"
		}
		secs := r.s.Hold.Seconds()
		r.add(m+"cores", li+": CPU while held", "cores", (end[i].CPUSeconds-start[i].CPUSeconds)/secs, false)
		r.add(m+"heap", li+": Go heap live over before the clients", "MB", mb(held[i].HeapLive-before[i].HeapLive), false)
		r.add(m+"rss", li+": RSS over before the clients", "MB", mb(held[i].RSS-before[i].RSS), false)
	}
	if m, err := proc.ReadMemory(); err == nil {
		r.add("hold.clients_rss", l+": the clients' process (the bench's parent): RSS", "MB", mb(m.RSS), false)
	}
	// The sessions are closed, not left to expire, so the growth to the
	// cap does not meet their expiries.
	total := h.Sessions()
	if err := stopProfiles(); err != nil {
		return err
	}
	if stopProfiles, err = r.startHoldProfiles(ctx, "close"); err != nil {
		return err
	}
	n, secs := h.CloseSessions(ctx)
	r.logf("%d of %d sessions closed in %.1f s", n, total, secs)
	if secs > 0 {
		r.add("hold.close_rate", l+": session closes per second", "/s", float64(n)/secs, true)
	}
	h.Close()
	debug.FreeOSMemory() // the clients' memory, before the growth to the cap
	return nil
}

// startHoldProfiles starts, with -profile, a CPU profile of every member
// and of this process (which holds the clients) named after phase; the
// function it returns stops them, once.
func (r *scaleRun) startHoldProfiles(ctx context.Context, phase string) (func() error, error) {
	stopMembers, err := r.startProfiles(ctx, phase)
	if err != nil || r.o.profileDir == "" {
		return stopMembers, err
	}
	stopClients, err := startProfile(r.o.profileDir, r.side+"-scale-"+phase+"-clients")
	if err != nil {
		_ = stopMembers()
		return nil, err
	}
	var once sync.Once
	var stopErr error
	return func() error {
		once.Do(func() {
			stopClients()
			stopErr = stopMembers()
		})
		return stopErr
	}, nil
}

// phaseQuota grows the cell to its cap, each process writing its own
// keys until the quota refuses a batch and then single keys until one is
// refused; then on one process it tries writes at the cap, deletes, and
// a write after the deletes.
func (r *scaleRun) phaseQuota(ctx context.Context) error {
	// Each process writes keys of its own span, a chunk at a time, so the
	// parent can stop between chunks if the machine runs short of memory.
	const span = 100_000_000 // keys each process may write: more than any cap
	chunk := max(1000, int(64<<20/int64(scale.KeyLen(scaleQuotaPrefix)+r.s.ValueSize)))
	start := time.Now()
	var written int64
	refusal := ""
	for from := 0; refusal == "" && from < span; from += chunk {
		if avail, ok := memAvailable(); ok && r.s.memFloor > 0 && avail < r.s.memFloor {
			r.logf("growth stopped after %.0f MB, before the cap: the machine has %.0f MB available, under -scale-mem-floor",
				mb(written), mb(avail))
			r.add("quota.stopped", fmt.Sprintf("growth to the cap: stopped for the machine's memory (under %s available)", r.s.MemFloor), "", 1, false)
			r.add("quota.grown", "growth to the cap, stopped: keys and values written", "MB", mb(written), false)
			return nil
		}
		res, err := scaleEach[scale.LoadResult](ctx, r, scale.OpLoad, func(i int) any {
			return scale.Load{Prefix: scaleQuotaPrefix, From: i*span + from, To: i*span + from + chunk, Batch: r.s.Batch,
				Writers: r.s.LoadWriters, ValueSize: r.s.ValueSize, UntilQuota: true}
		})
		if err != nil {
			return err
		}
		for _, lr := range res {
			written += lr.Bytes
			if refusal == "" {
				refusal = lr.RefusedError
			}
		}
	}
	took := time.Since(start).Seconds()
	if err := r.caughtUp(ctx); err != nil {
		return err
	}
	sts, err := scaleEach[cell.ScaleStatus](ctx, r, scale.OpStatus, func(int) any { return nil })
	if err != nil {
		return err
	}
	c := r.s.cap()
	l := fmt.Sprintf("growth to the cap of %.0f MB", mb(c))
	r.logf("%s: %.0f MB more written in %.1f s; refused with %q", l, mb(written), took, refusal)
	r.add("quota.cap", "the keyspace cap (coord QuotaBytes: keys and values; etcd QuotaBackendBytes: its database file)", "MB", mb(c), false)
	r.add("quota.grown", l+": keys and values written before the refusal", "MB", mb(written), false)
	r.add("quota.seconds", l+": time", "s", took, false)
	r.add("quota.live_at_cap", l+": live keys and values the bench wrote, in all", "MB", mb(r.live+written), false)
	if st := sts[0]; st.KeyspaceBytes >= 0 {
		r.add("quota.keyspace", l+": keyspace bytes as the quota counts them, at the refusal", "MB", mb(st.KeyspaceBytes), false)
	}
	if st := sts[0]; st.DBBytes >= 0 {
		r.add("quota.db", l+": database file at the refusal", "MB", mb(st.DBBytes), false)
		r.add("quota.db_in_use", l+": database in use at the refusal", "MB", mb(st.DBInUseBytes), false)
	}
	for i, p := range r.c {
		r.add(fmt.Sprintf("quota.m%d.data_dir", i), fmt.Sprintf("%s, m%d: data directory", l, i), "MB", mb(dirBytes(p.Spec.Member.Dir)), false)
	}
	ms, err := r.mems(ctx, true)
	if err != nil {
		return err
	}
	r.addMemsOf("cap", fmt.Sprintf("at the cap (%.0f MB live)", mb(r.live+written)), ms, r.live+written)

	var q scale.QuotaResult
	if err := r.call(ctx, 0, scale.OpQuotaCheck, scale.QuotaCheck{Prefix: scaleCheckPrefix, Writes: 20, ValueSize: r.s.ValueSize,
		DeletePrefix: scaleLoadPrefix, Deletes: min(10_000, r.s.Keys)}, &q); err != nil {
		return err
	}
	r.logf("at the cap: %d of %d writes refused by the quota (%q), %d otherwise (%s); %d of %d keys deleted in %.2f s %s; "+
		"a write after: %s; a linearizable get: %v %s", q.WritesRefused, q.Writes, q.RefusedError, q.WritesOther, q.OtherError,
		q.Deleted, q.Deletes, q.DeleteSeconds, q.DeleteError, q.AfterDelete, q.GetOK, q.GetError)
	r.add("quota.writes_refused", fmt.Sprintf("at the cap: of %d new writes, refused by the quota", q.Writes), "writes", float64(q.WritesRefused), false)
	r.add("quota.writes_other", fmt.Sprintf("at the cap: of %d new writes, failed otherwise or accepted", q.Writes), "writes",
		float64(q.WritesOther+q.WritesOK), false)
	r.add("quota.deleted", fmt.Sprintf("at the cap: of %d deletes (transactions of 100), done", q.Deletes), "keys", float64(q.Deleted), true)
	if q.DeleteSeconds > 0 {
		r.add("quota.delete_rate", "at the cap: deletes per second", "keys/s", float64(q.Deleted)/q.DeleteSeconds, true)
	}
	r.add("quota.write_after_delete", "at the cap, after the deletes: a new write accepted (1) or refused (0)", "", boolValue(q.AfterDelete == "ok"), false)
	r.add("quota.get", "at the cap: a linearizable get served (1) or not (0)", "", boolValue(q.GetOK), false)
	if q.WritesRefused != q.Writes {
		return fmt.Errorf("at the cap %d of %d writes were refused by the quota (others: %s)", q.WritesRefused, q.Writes, q.OtherError)
	}
	if q.Deleted != q.Deletes {
		return fmt.Errorf("at the cap %d of %d deletes were done: %s", q.Deleted, q.Deletes, q.DeleteError)
	}
	if !q.GetOK {
		return errors.New("at the cap a linearizable get failed: " + q.GetError)
	}
	return nil
}

// memAvailable reads the machine's MemAvailable from /proc/meminfo.
func memAvailable() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
