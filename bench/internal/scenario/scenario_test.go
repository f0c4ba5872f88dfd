package scenario

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/coordcell"
	"github.com/coordcell/coord/bench/internal/etcdcell"
	"github.com/coordcell/coord/bench/internal/frontcell"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakIgnores()...)
}

// tiny is a configuration small enough for tests: every scenario's code
// runs, nothing is measured seriously.
func tiny() Config {
	return Config{
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond,
		PutClients: []int{1, 4}, GetClients: 4, GetKeys: 20, LockHolders: 4, ValueSize: 100,
		Sessions: 10, SessionsLarge: 20, SessionTTL: 4 * time.Second, KeepAlive: time.Second,
		CreateWorkers: 4, CreateLimit: time.Minute, ElectionTTL: 4 * time.Second, StopMode: cell.Crash, FailoverRounds: 1,
		Watchers: 10, WatchPuts: 3,
		Clients: 4, ClientSessions: 20, ClientWatchers: 3, ClientCreateLimit: time.Minute, ClientCreateWorkers: 8, ClientCallers: []int{2},
		InflightWriters: 6, InflightCells: 2, InflightStops: []cell.StopMode{cell.Crash},
	}
}

// sides are the two cell openers, etcd in-process as the program's
// default.
var sides = map[string]cell.Opener{
	"coord": coordcell.Open,
	"etcd":  etcdcell.Opener(etcdcell.InProcess),
}

func env(t *testing.T, open cell.Opener) Env {
	return Env{
		Open: func(ctx context.Context) (cell.Cell, error) {
			return open(ctx, cell.Options{Dir: t.TempDir()})
		},
		Logf: t.Logf,
	}
}

// run runs sc with cfg on both sides and returns each side's metrics by
// name.
func run(t *testing.T, sc Scenario, cfg Config) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	for _, side := range []string{"coord", "etcd"} {
		if sc.CoordOnly && side != "coord" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		open := sides[side]
		if sc.EtcdFront && side == "coord" {
			open = frontcell.Open
		}
		ms, err := sc.Run(ctx, env(t, open), cfg)
		cancel()
		if err != nil {
			t.Fatalf("%s %s: %v", side, sc.Name, err)
		}
		out[side] = map[string]float64{}
		for _, m := range ms {
			if m.Name == "" || m.Label == "" || m.Unit == "" {
				t.Errorf("%s %s: incomplete metric %+v", side, sc.Name, m)
			}
			out[side][m.Name] = m.Value
		}
	}
	return out
}

// positive checks that every side reports each name with a value > 0.
func positive(t *testing.T, got map[string]map[string]float64, names ...string) {
	t.Helper()
	for side, ms := range got {
		for _, n := range names {
			if v, ok := ms[n]; !ok || v <= 0 {
				t.Errorf("%s: %s = %v (present %v), want > 0", side, n, v, ok)
			}
		}
	}
}

// zero checks that every side reports each name with the value 0.
func zero(t *testing.T, got map[string]map[string]float64, names ...string) {
	t.Helper()
	for side, ms := range got {
		for _, n := range names {
			if v, ok := ms[n]; !ok || v != 0 {
				t.Errorf("%s: %s = %v (present %v), want 0", side, n, v, ok)
			}
		}
	}
}

func scenarioNamed(t *testing.T, name string) Scenario {
	sc, err := ByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestPut(t *testing.T) {
	got := run(t, scenarioNamed(t, "put"), tiny())
	positive(t, got, "put.c1.rate", "put.c1.p50", "put.c1.p99", "put.c4.rate", "put.c4.p99")
}

func TestGet(t *testing.T) {
	got := run(t, scenarioNamed(t, "get"), tiny())
	positive(t, got, "get.linearizable.rate", "get.linearizable.p99", "get.serializable.rate")
}

func TestLock(t *testing.T) {
	got := run(t, scenarioNamed(t, "lock"), tiny())
	positive(t, got, "lock.contended.rate", "lock.contended.p50", "lock.uncontended.rate")
}

func TestSessions(t *testing.T) {
	got := run(t, scenarioNamed(t, "sessions"), tiny())
	positive(t, got, "sessions.create_rate", "sessions.rss")
	zero(t, got, "sessions.expired", "sessions.not_created")
	// Idle sessions write nothing to coord's log.
	if v := got["coord"]["sessions.log_entries"]; v != 0 {
		t.Errorf("coord wrote %v log entries keeping sessions alive", v)
	}
}

func TestSessionsLarge(t *testing.T) {
	got := run(t, scenarioNamed(t, "sessions-large"), tiny())
	if _, ok := got["etcd"]; ok {
		t.Error("sessions-large ran on etcd")
	}
	zero(t, got, "sessions-large.expired", "sessions-large.log_entries", "sessions-large.not_created")
}

func TestFailover(t *testing.T) {
	for _, mode := range []cell.StopMode{cell.Crash, cell.Graceful} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := tiny()
			cfg.StopMode = mode
			got := run(t, scenarioNamed(t, "failover"), cfg)
			positive(t, got, "failover.leader.p50", "failover.write.p50", "failover.write.max")
			for side, ms := range got {
				// The candidate leads once the holder's session expires:
				// no sooner than a TTL minus a keep-alive interval.
				if h := ms["failover.election"]; h < float64(cfg.ElectionTTL.Milliseconds())/2 {
					t.Errorf("%s: election hand-over after %vms, sooner than the TTL allows", side, h)
				}
			}
		})
	}
}

// The in-flight scenario on both sides, both stops, one cell each: every
// writer had a write in flight, and each was timed.
func TestInflight(t *testing.T) {
	cfg := tiny()
	cfg.InflightCells, cfg.InflightWriters = 1, 8
	cfg.InflightStops = []cell.StopMode{cell.Crash, cell.Graceful}
	got := run(t, scenarioNamed(t, "inflight"), cfg)
	for _, mode := range cfg.InflightStops {
		m := "inflight." + string(mode)
		positive(t, got, m+".writes", m+".p99", m+".max", m+".failover.write")
		for side, ms := range got {
			t.Logf("%s %s: %v in flight, p99 %vms, %v errors, first write %vms", side, mode, ms[m+".writes"], ms[m+".p99"], ms[m+".errors"], ms[m+".failover.write"])
			if ms[m+".errors."+string(cell.ClassLimit)] != 0 {
				t.Errorf("%s %s: a write in flight outlived the bench's limit", side, mode)
			}
		}
	}
}

func TestWatch(t *testing.T) {
	got := run(t, scenarioNamed(t, "watch"), tiny())
	positive(t, got, "watch.all.p50", "watch.all.p99", "watch.all.max", "watch.each.p50")
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {99, 10}, {100, 10}, {0, 1}, {10, 1}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of nothing = %v", got)
	}
}

// leakIgnores are the goroutines embedded etcd leaves behind: HTTP
// connections between its members that its Close gives up waiting for
// (it waits up to a second for the peer handlers), blocked reading from
// connections nobody closes, and peer requests that arrived while a
// member closed, blocked on its closed backend. They are etcd's (coord
// has no HTTP), not the bench's; every other goroutine must be gone.
func leakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		// embed serves v3lock and v3election through an in-process
		// v3client it never closes (embed/serve.go), so once a lock was
		// taken through v3lock (etcd-lock) that client's lessor loops
		// and the in-process keep-alive stream under them outlive
		// Etcd.Close. A clientv3 of the bench's own left open would
		// still show: by its gRPC transport's goroutines.
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter.(*chanStream).RecvMsg"),
		goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*LeaseServer).LeaseKeepAlive"),
		goleak.IgnoreTopFunction("go.etcd.io/etcd/client/v3.(*lessor).sendKeepAliveLoop"),
		goleak.IgnoreTopFunction("go.etcd.io/etcd/client/v3.(*lessor).deadlineLoop"),
	}
}
