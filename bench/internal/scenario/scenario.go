// Package scenario holds the bench's scenarios. Each runs against a
// cell.Cell, so the same code measures coord and etcd; each returns its
// figures as Metrics.
package scenario

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// Config holds the sizes of every scenario (the program's flags).
type Config struct {
	// Duration is the measured time of each load point (put, get, lock);
	// Warmup runs before it, unmeasured.
	Duration time.Duration
	Warmup   time.Duration
	// PutClients are the concurrencies of the put scenario.
	PutClients []int
	// GetClients is the concurrency of the get scenario, GetKeys the
	// number of keys it reads from.
	GetClients int
	GetKeys    int
	// LockHolders is the number of lock holders (and of locks, when
	// uncontended).
	LockHolders int
	// ValueSize is the size of every value written.
	ValueSize int
	// Sessions is the number of sessions of the sessions scenario on both
	// sides, SessionsLarge that of the coord-only sessions-large one.
	Sessions      int
	SessionsLarge int
	// SessionTTL is their TTL, KeepAlive how long they are kept alive
	// while measured, CreateWorkers how many create them concurrently.
	SessionTTL    time.Duration
	KeepAlive     time.Duration
	CreateWorkers int
	// CreateLimit bounds the creation of the sessions; those not created
	// by then are reported and left out.
	CreateLimit time.Duration
	// ElectionTTL is the session TTL of the election hand-over.
	ElectionTTL time.Duration
	// StopMode is how the failover scenario stops the leader, and
	// FailoverRounds how many times (each on a fresh cell).
	StopMode       cell.StopMode
	FailoverRounds int
	// Watchers is the number of watchers of the watch scenario, WatchPuts
	// the number of measured puts they all receive.
	Watchers  int
	WatchPuts int
	// Clients is the number of clients (processes that are not members,
	// here each its own connection) of clients-sessions and
	// clients-watch, client i connected to member i%3; ClientSessions
	// the sessions each creates and keeps alive, ClientWatchers the
	// watchers of one prefix each starts. ClientCreateLimit bounds the
	// creation of all the clients' sessions, ClientCreateWorkers how
	// many create them concurrently.
	Clients             int
	ClientSessions      int
	ClientWatchers      int
	ClientCreateLimit   time.Duration
	ClientCreateWorkers int
	// ClientCallers are the concurrencies of client-put.
	ClientCallers []int
	// InflightWriters is the number of writers of the inflight scenario
	// (each with one write in flight when the leader stops),
	// InflightCells the fresh cells it runs each of InflightStops on.
	// Its writers warm up for Warmup before the stop.
	InflightWriters int
	InflightCells   int
	InflightStops   []cell.StopMode
	// EtcdPinned has the etcd-* scenarios' client i dial member i alone;
	// unset, each client has every member's endpoint and clientv3
	// spreads its calls over them (round-robin per call).
	EtcdPinned bool
}

// Env is what a scenario runs in.
type Env struct {
	// Open starts a fresh cell of the side under test.
	Open func(ctx context.Context) (cell.Cell, error)
	// Logf receives progress lines; nil = discard.
	Logf func(format string, args ...any)
}

func (e Env) log(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

// Metric is one figure of a scenario.
type Metric struct {
	// Name identifies the figure across sides and runs, e.g. "put.c16.p99".
	Name string `json:"name"`
	// Label describes it for the table.
	Label string `json:"label"`
	// Unit is the unit of Value ("ops/s", "ms", "MB", ...).
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	// HigherIsBetter says which way is better ("" when neither).
	HigherIsBetter bool `json:"higher_is_better,omitempty"`
	// OmitZero asks the report to leave the figure out when it is 0 in
	// every round of both sides (one of many counts, mostly 0).
	OmitZero bool `json:"omit_zero,omitempty"`
}

// Scenario is one runnable scenario.
type Scenario struct {
	Name string
	// Doc says what it measures, for -help.
	Doc string
	// CoordOnly scenarios have no etcd counterpart.
	CoordOnly bool
	// ProcsOnly scenarios run with one member per process whatever
	// -shape says, only when named (never in "all"), and have no Run:
	// the program runs them itself (client-attacks, scale).
	ProcsOnly bool
	// EtcdFront scenarios drive both sides through clientv3 over
	// loopback gRPC: their coord side is a cell with etcdapi serving on
	// each member (package frontcell) instead of the plain coord cell.
	EtcdFront bool
	// Once scenarios run one round on each side whatever -rounds says:
	// their figures are peaks or one long run's (client-attacks, scale).
	Once bool
	Run  func(ctx context.Context, env Env, cfg Config) ([]Metric, error)
}

// All lists the scenarios in the order a full run takes them.
var All = []Scenario{
	{Name: "put", Doc: "put of ValueSize-byte values at each PutClients concurrency: ops/s, p50, p99", Run: Put},
	{Name: "get", Doc: "linearizable and serializable get, GetClients clients: ops/s, p50, p99", Run: Get},
	{Name: "lock", Doc: "Lock+Unlock cycles, contended (one lock) and uncontended (one lock per holder)", Run: Lock},
	{Name: "sessions", Doc: "create Sessions sessions, keep them alive: CPU, memory, log entries, expiries", Run: Sessions},
	{Name: "sessions-large", Doc: "the sessions scenario with SessionsLarge sessions (coord only)", CoordOnly: true, Run: SessionsLarge},
	{Name: "failover", Doc: "stop the leader: time to a new leader and a write; election hand-over after a holder dies", Run: Failover},
	{Name: "inflight", Doc: "InflightWriters writes in flight on the survivors when the leader stops (crash, graceful): stop to each result p50/p99/max, errors by class, first write after the stop",
		Run: Inflight},
	{Name: "watch", Doc: "Watchers watchers on one prefix, one put at a time: time until all received it", Run: Watch},
	{Name: "clients-sessions", Doc: "Clients clients x ClientSessions sessions kept alive: log entries, keep-alive messages, traffic per member, CPU (coord only)",
		CoordOnly: true, Run: ClientsSessions},
	{Name: "clients-watch", Doc: "Clients clients x ClientWatchers watchers of one prefix: frames per change, time until all received a put (coord only)",
		CoordOnly: true, Run: ClientsWatch},
	{Name: "client-put", Doc: "put through clients on loopback (etcd: gRPC) at each ClientCallers concurrency, and in-process alongside", Run: ClientPut},
	{Name: "client-lock", Doc: "the lock scenario with the holders' sessions on clients on loopback (etcd: gRPC), one client per member", Run: ClientLock},
	{Name: "client-get", Doc: "linearizable get through clients on loopback (etcd: gRPC), GetClients callers", Run: ClientGet},
	{Name: "etcd-put", Doc: "the put scenario through etcd's clientv3 over loopback gRPC on both sides (coord behind etcdapi): ops/s, p50, p99, fsyncs",
		EtcdFront: true, Run: EtcdPut},
	{Name: "etcd-get", Doc: "the get scenario (linearizable, serializable) through clientv3 over loopback gRPC on both sides (coord behind etcdapi)",
		EtcdFront: true, Run: EtcdGet},
	{Name: "etcd-lock", Doc: "the lock scenario through etcd's v3lock service (clientv3, loopback gRPC) on both sides: coord's fair lock behind etcdapi, etcd's own",
		EtcdFront: true, Run: EtcdLock},
	{Name: "client-attacks", Doc: "issue 22's attacks on a member's client door, one after the other, against 3 member processes: " +
		"each member's peak RSS and heap, its door counters, the longest commit gap of control clients (coord only, member processes, only when named)",
		CoordOnly: true, ProcsOnly: true, Once: true},
	{Name: "scale", Doc: "issue 27's scale run against 3 member processes, once per side, only when named: -scale-keys keys of 1 KB loaded; " +
		"each member's RSS and heap against the live data, data dirs, restart after kill -9, a new member's catch-up by snapshot, " +
		"put/get/lock loaded vs empty, a paged List, a watch from far back, sessions and watches held through clients, the quota's refusals",
		ProcsOnly: true, Once: true},
}

// ByName returns the scenario called name.
func ByName(name string) (Scenario, error) {
	for _, s := range All {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q", name)
}

// withCell opens a cell, runs f on it and closes it. A cell that could
// not start because a port was taken is started again (cell.PortTaken).
func withCell(ctx context.Context, env Env, f func(c cell.Cell) ([]Metric, error)) ([]Metric, error) {
	start := time.Now()
	c, err := env.Open(ctx)
	for try := 1; cell.PortTaken(err) && try < cell.OpenRetries && ctx.Err() == nil; try++ {
		env.log("cell start found a port taken (%v): again on fresh ports", err)
		c, err = env.Open(ctx)
	}
	if err != nil {
		return nil, err
	}
	env.log("cell up in %v", time.Since(start).Round(time.Millisecond))
	ms, err := f(c)
	start = time.Now()
	if cerr := c.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close the cell: %w", cerr)
	}
	env.log("cell closed in %v", time.Since(start).Round(time.Millisecond))
	return ms, err
}

// percentile returns the p-th percentile (0..100) of sorted, by nearest
// rank; 0 for an empty slice.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// sortedCopy returns ds sorted, leaving ds as it was.
func sortedCopy(ds []time.Duration) []time.Duration {
	out := slices.Clone(ds)
	slices.Sort(out)
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// value returns a value of n bytes.
func value(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return v
}
