package scenario

import (
	"cmp"
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

// keepAliveDivisor is coord's: a session is kept alive every
// TTL/keepAliveDivisor (internal/sessions.KeepAliveDivisor), by one
// message per client to its member and one per member to the leader.
const keepAliveDivisor = 4

// clientSettleIntervals is how many keep-alive intervals the cell is left
// alone after the sessions are created: a client's keep-alives drift
// into its member's phase within a few intervals (coord's clientFold),
// and until then the member answers them with early batches.
const clientSettleIntervals = 3

// ClientsSessions connects cfg.Clients clients, client i to member i%3,
// creates cfg.ClientSessions sessions with cfg.SessionTTL on each (by
// cfg.ClientCreateWorkers concurrent creators, within
// cfg.ClientCreateLimit),
// lets the keep-alives settle into their phase, then keeps the sessions
// alive for cfg.KeepAlive and reports what that cost: log entries (none
// should be written), the keep-alive messages the leader received and
// the frames each client sent, per interval (TTL/4); and, since the three
// members share this process and its CPU time cannot be split between
// them, each member's traffic with its peers and its clients per second
// as its share of the work, beside the process's CPU.
func ClientsSessions(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		tc, ok := c.(cell.TrafficCell)
		if !ok {
			return nil, fmt.Errorf("the %s cell does not count its traffic", c.Side())
		}
		clients, err := connectClients(ctx, c, cfg.Clients)
		if err != nil {
			return nil, err
		}
		defer closeClients(clients)
		n := cfg.Clients * cfg.ClientSessions
		all, failed, took, err := createClientSessions(ctx, env, clients, cfg, n)
		if err != nil {
			return nil, err
		}
		env.log("clients-sessions: created %d of %d on %d clients in %v", len(all), n, cfg.Clients, took.Round(time.Millisecond))
		interval := cfg.SessionTTL / keepAliveDivisor
		settle := sessionSettle + clientSettleIntervals*interval
		if failed > 0 {
			// A failed creation may have committed: its session, kept by
			// nobody, expires a TTL later, which writes to the log; that
			// must happen before the window, not in it.
			settle = max(settle, cfg.SessionTTL+sessionSettle+interval)
		}
		sleep(ctx, settle)

		leader := c.Leader()
		if leader < 0 {
			return nil, errors.New("no leader after creating the sessions")
		}
		idx0, err := c.LogIndex(ctx)
		if err != nil {
			return nil, err
		}
		mt0, ct0 := tc.Traffic(), clientTraffic(clients)
		cpu0, t0 := proc.CPU(), time.Now()
		sleep(ctx, cfg.KeepAlive)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cpu, window := proc.CPU()-cpu0, time.Since(t0)
		mt1, ct1 := tc.Traffic(), clientTraffic(clients)
		idx1, err := c.LogIndex(ctx)
		if err != nil {
			return nil, err
		}
		if now := c.Leader(); now != leader {
			return nil, fmt.Errorf("the leader changed during the window (member %d, then %d): its figures would mix two leaders", leader, now)
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
		intervals := window.Seconds() / interval.Seconds()
		secs := window.Seconds()

		// Member side: what the leader received from the followers, and
		// each member's traffic with its peers and its clients.
		var kaToLeader, acksFromLeader uint64
		var peers [cell.Members]cell.Link
		var fromClients [cell.Members]cell.ClientTraffic
		for m := range cell.Members {
			peers[m] = mt1[m].Peers.Sub(mt0[m].Peers)
			if m != leader {
				kaToLeader += mt1[m].SessionMsgsTo[leader] - mt0[m].SessionMsgsTo[leader]
			} else {
				for to := range cell.Members {
					acksFromLeader += mt1[m].SessionMsgsTo[to] - mt0[m].SessionMsgsTo[to]
				}
			}
		}
		var perClient []cell.ClientTraffic
		var total cell.ClientTraffic
		for i := range clients {
			d := ct1[i].Sub(ct0[i])
			perClient = append(perClient, d)
			total = total.Add(d)
			fromClients[i%cell.Members] = fromClients[i%cell.Members].Add(d)
		}
		maxKA := slices.MaxFunc(perClient, func(a, b cell.ClientTraffic) int { return cmp.Compare(a.KeepAlives, b.KeepAlives) }).KeepAlives
		followers := float64(cell.Members - 1)

		env.log("clients-sessions: %d kept alive %v (%.1f intervals of %v): %d log entries, %.2fs CPU, "+
			"leader got %d keep-alives (%.2f per follower per interval), clients sent %d keep-alives and %d frames (%.2f and %.2f per client per interval), %d expired",
			len(all), window.Round(time.Millisecond), intervals, interval, idx1-idx0, cpu.Seconds(),
			kaToLeader, float64(kaToLeader)/followers/intervals, total.KeepAlives, total.FramesOut,
			float64(total.KeepAlives)/float64(len(clients))/intervals, float64(total.FramesOut)/float64(len(clients))/intervals, expired)

		label := fmt.Sprintf("%d clients x %d sessions", cfg.Clients, cfg.ClientSessions)
		perIv := func(v uint64, per float64) float64 { return float64(v) / per / intervals }
		out := []Metric{
			{Name: "clients-sessions.create_rate", Label: label + ": creations", Unit: "/s", Value: float64(len(all)) / took.Seconds(), HigherIsBetter: true},
			{Name: "clients-sessions.not_created", Label: fmt.Sprintf("%s: not created within %v", label, cfg.ClientCreateLimit),
				Unit: "sessions", Value: float64(n - len(all))},
			{Name: "clients-sessions.create_failed", Label: label + ": creations failed (of the not created)", Unit: "sessions", Value: float64(failed)},
			{Name: "clients-sessions.log_entries", Label: label + ": log entries while kept alive", Unit: "entries", Value: float64(idx1 - idx0)},
			{Name: "clients-sessions.expired", Label: label + ": expired", Unit: "sessions", Value: float64(expired)},
			{Name: "clients-sessions.cores", Label: label + ": keep-alive CPU (process: 3 members and the clients)", Unit: "cores", Value: cpu.Seconds() / secs},
			{Name: "clients-sessions.leader_keepalives", Label: label + ": keep-alive messages to the leader, per follower per interval",
				Unit: "msgs", Value: perIv(kaToLeader, followers)},
			{Name: "clients-sessions.leader_keepalives_rate", Label: label + ": keep-alive messages to the leader", Unit: "msgs/s", Value: float64(kaToLeader) / secs},
			{Name: "clients-sessions.leader_acks", Label: label + ": acks from the leader, per follower per interval", Unit: "msgs", Value: perIv(acksFromLeader, followers)},
			{Name: "clients-sessions.client_keepalives", Label: label + ": keep-alive frames per client per interval", Unit: "frames", Value: perIv(total.KeepAlives, float64(len(clients)))},
			{Name: "clients-sessions.client_keepalives_max", Label: label + ": keep-alive frames of the busiest client per interval", Unit: "frames", Value: perIv(maxKA, 1)},
			{Name: "clients-sessions.client_frames", Label: label + ": frames per client per interval (keep-alives, pings)", Unit: "frames", Value: perIv(total.FramesOut, float64(len(clients)))},
			{Name: "clients-sessions.client_bytes", Label: label + ": bytes per client per interval", Unit: "B", Value: perIv(total.BytesOut, float64(len(clients)))},
			{Name: "clients-sessions.member_frames", Label: label + ": frames to each client per interval (acks, pongs)", Unit: "frames", Value: perIv(total.FramesIn, float64(len(clients)))},
		}
		// Per member: the leader, then the followers in member order.
		roles := []int{leader}
		for m := range cell.Members {
			if m != leader {
				roles = append(roles, m)
			}
		}
		for k, m := range roles {
			role, name := "leader", "leader"
			if k > 0 {
				role, name = fmt.Sprintf("follower %d", k), fmt.Sprintf("follower%d", k)
			}
			p, cl := peers[m], fromClients[m]
			out = append(out,
				Metric{Name: "clients-sessions." + name + ".peer_frames", Label: fmt.Sprintf("%s: %s, frames to and from its peers", label, role),
					Unit: "frames/s", Value: float64(p.FramesOut+p.FramesIn) / secs},
				Metric{Name: "clients-sessions." + name + ".peer_bytes", Label: fmt.Sprintf("%s: %s, bytes to and from its peers", label, role),
					Unit: "KB/s", Value: float64(p.BytesOut+p.BytesIn) / 1024 / secs},
				Metric{Name: "clients-sessions." + name + ".client_frames", Label: fmt.Sprintf("%s: %s, frames to and from its clients", label, role),
					Unit: "frames/s", Value: float64(cl.FramesOut+cl.FramesIn) / secs},
				Metric{Name: "clients-sessions." + name + ".client_bytes", Label: fmt.Sprintf("%s: %s, bytes to and from its clients", label, role),
					Unit: "KB/s", Value: float64(cl.BytesOut+cl.BytesIn) / 1024 / secs},
			)
		}
		return append(out,
			Metric{Name: "clients-sessions.rss", Label: label + ": RSS at the end (process)", Unit: "MB", Value: mb(mem.RSS)}), nil
	})
}

// clientTraffic reads every client's counters.
func clientTraffic(clients []cell.Client) []cell.ClientTraffic {
	out := make([]cell.ClientTraffic, len(clients))
	for i, cl := range clients {
		if tc, ok := cl.(cell.TrafficClient); ok {
			out[i] = tc.Traffic()
		}
	}
	return out
}

// createProgress is how often the creation logs how far it got.
const createProgress = 10 * time.Second

// createClientSessions creates n sessions with cfg.SessionTTL, session i
// on client i%len(clients), by cfg.ClientCreateWorkers concurrent
// creators, and starts no more once cfg.ClientCreateLimit has passed. A
// creation that fails (a client that lost its member ends the creations
// in flight with an ambiguous outcome) is counted and the creator goes
// on; the creation fails only if more than a tenth of the attempts did.
// It returns the sessions created, the failed attempts and how long it
// took.
func createClientSessions(ctx context.Context, env Env, clients []cell.Client, cfg Config, n int) ([]cell.Session, int, time.Duration, error) {
	all := make([]cell.Session, n)
	cctx, cancel := context.WithTimeout(ctx, cfg.ClientCreateLimit)
	defer cancel()
	var next, created, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(createProgress)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				env.log("clients-sessions: %d created, %d failed after %v", created.Load(), failed.Load(), time.Since(start).Round(time.Second))
			}
		}
	})
	for range cfg.ClientCreateWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || cctx.Err() != nil {
					if i >= n {
						cancel() // stops the progress log
					}
					return
				}
				// Under ctx, not cctx, as in createSessions.
				s, err := clients[i%len(clients)].NewSession(ctx, cfg.SessionTTL)
				if err != nil {
					failed.Add(1)
					err = fmt.Errorf("session %d: %w", i, err)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				created.Add(1)
				all[i] = s
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, 0, 0, err
	}
	if f := int(failed.Load()); f > 0 {
		env.log("clients-sessions: %d creations failed, the first with: %v", f, *firstErr.Load())
		if f > int(next.Load())/10 {
			return nil, 0, 0, fmt.Errorf("create %d sessions on %d clients: %d failed, the first with: %w", n, len(clients), f, *firstErr.Load())
		}
	}
	return slices.DeleteFunc(all, func(s cell.Session) bool { return s == nil }), int(failed.Load()), took, nil
}
