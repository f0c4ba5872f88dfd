package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coordcell/coord/bench/internal/attack"
	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/etcdcell"
	"github.com/coordcell/coord/bench/internal/scenario"
)

// childFlag is the hidden flag with which the program re-executes itself
// to run one scenario on one side: -child side:scenario.
const childFlag = "child"

// options are the program's flags.
type options struct {
	scenarios   []string
	sides       []string
	out         string
	md          string
	dir         string
	etcdClient  etcdcell.ClientMode
	profileDir  string
	traceDir    string
	traceReport string
	// compareRuns holds two results files whose headline points are
	// compared (-compare-runs).
	compareRuns []string
	cfg         scenario.Config
	child       string
	member      bool
	shape       string
	// rounds is how many interleaved rounds each scenario runs on each
	// side: coord, etcd, coord, etcd...
	rounds int
	soak   soakOptions
	// attack sizes the client-attacks scenario (-attack-size).
	attack attack.Config
	// scale sizes the scale scenario (-scale-*).
	scale scaleOptions
	// memberGoMemLimit is GOMEMLIMIT for every member process
	// (-member-gomemlimit), "" = none.
	memberGoMemLimit string
}

// memberEnv is what every member process gets in its environment.
func (o *options) memberEnv() []string {
	if o.memberGoMemLimit == "" {
		return nil
	}
	return []string{"GOMEMLIMIT=" + o.memberGoMemLimit}
}

// parseFlags parses args (without the program name).
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	c := &o.cfg
	scen := fs.String("scenario", "all", "scenarios to run, comma-separated, or all: "+scenarioNames())
	sides := fs.String("sides", "coord,etcd", "sides to run, comma-separated")
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds of each scenario (coord, etcd, coord, etcd...): each side's figure is its median, "+
		"coord/etcd the median of the rounds' paired ratios, with their range; 1 runs each side once")
	fs.StringVar(&o.out, "out", "results.json", "the JSON results file")
	fs.StringVar(&o.md, "md", "", "also write the table as Markdown to this file")
	fs.StringVar(&o.dir, "dir", os.TempDir(), "where the members' data directories go (must be a real disk: fsync is measured)")
	etcdClient := fs.String("etcd-client", string(etcdcell.InProcess),
		"how the bench talks to etcd: inproc (v3client, in-process, as an embedding application does) or grpc (loopback)")

	fs.BoolVar(&c.EtcdPinned, "etcd-pinned", false, "etcd-put, etcd-get, etcd-lock: clientv3 client i dials member i alone "+
		"(default: each of the 3 clients has all 3 endpoints and clientv3 spreads its calls over them, round-robin)")
	fs.StringVar(&o.profileDir, "profile", "", "write each child's CPU and allocation profiles into this directory "+
		"(-shape procs: each member process's CPU profile over each load point, side-scenario@procs-rN-kind-cN-mP.cpu.pprof; scale: each member process's CPU profile over each of its load points, and over the sessions and watches held, and over their closes, with the clients' process: side-scale-hold-clients.cpu.pprof, side-scale-close-clients.cpu.pprof)")
	fs.StringVar(&o.traceDir, "trace", "", "write each child's runtime execution trace into this directory (side-scenario.trace; each measured operation "+
		"is a region \"op\"): large, so run it with one scenario, one side and one load point, e.g. -scenario put -sides coord -clients 64")
	fs.StringVar(&o.traceReport, "trace-report", "", "instead of running, read a trace written by -trace and print where its slowest operations waited "+
		"(running, waiting for a CPU, blocked; fsyncs, GC and the goroutines that had the CPUs around them)")
	compare := fs.String("compare-runs", "", "instead of running, read two results files (A.json,B.json) of full runs and print, for each headline point "+
		"(a target on the ratio, or a CPU per operation), both runs' paired ranges and whether they overlap")
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, "measured time of each put, get and lock point")
	fs.DurationVar(&c.Warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each put, get and lock point")
	clients := fs.String("clients", "1,16,64", "put: concurrent clients of each point")
	fs.IntVar(&c.ValueSize, "value-size", 100, "put, get: value size in bytes")
	fs.IntVar(&c.GetClients, "get-clients", 16, "get: concurrent clients")
	fs.IntVar(&c.GetKeys, "get-keys", 1000, "get: keys read")
	fs.IntVar(&c.LockHolders, "lock-holders", 16, "lock: holders (one lock contended; one lock each uncontended)")
	fs.IntVar(&c.Sessions, "sessions", 10_000, "sessions: sessions created on each side")
	fs.IntVar(&c.SessionsLarge, "sessions-large", 100_000, "sessions-large: sessions created on coord (0 skips the scenario)")
	fs.DurationVar(&c.SessionTTL, "session-ttl", 10*time.Second, "sessions: TTL")
	fs.DurationVar(&c.KeepAlive, "keepalive", 30*time.Second, "sessions: measured keep-alive window")
	fs.IntVar(&c.CreateWorkers, "create-workers", 64, "sessions: concurrent creators")
	fs.DurationVar(&c.CreateLimit, "create-limit", 20*time.Second,
		"sessions: time limit of the creation; sessions not created by then are reported and left out")
	fs.DurationVar(&c.ElectionTTL, "election-ttl", 5*time.Second, "failover: session TTL of the election hand-over (both sides)")
	stop := fs.String("failover-stop", string(cell.Crash),
		"failover: how the leader is stopped: crash (coord: transport cut; etcd: HardStop) or graceful (Close on both)")
	fs.IntVar(&c.FailoverRounds, "failover-rounds", 7, "failover: rounds, each on a fresh cell (the time to a new leader is mostly the randomized election timeout: a median over few rounds is noise)")
	fs.IntVar(&c.InflightWriters, "inflight-writers", 128, "inflight: writers on the survivors, each with a write in flight when the leader stops")
	fs.IntVar(&c.InflightCells, "inflight-cells", 3, "inflight: fresh cells each stop mode runs on (its figures pool their writes)")
	inflightStops := fs.String("inflight-stop", "crash,graceful", "inflight: how the leader is stopped, comma-separated: crash (one process: coord's transport cut, "+
		"etcd's HardStop; -shape procs: kill -9 of the leader's process) and/or graceful (Close on both)")
	fs.IntVar(&c.Watchers, "watchers", 1000, "watch: watchers on one prefix")
	fs.IntVar(&c.WatchPuts, "watch-puts", 50, "watch, clients-watch: measured puts")
	fs.IntVar(&c.Clients, "client-count", 100, "clients-sessions, clients-watch: clients (coord.Connect), client i on member i%3")
	fs.IntVar(&c.ClientSessions, "client-sessions", 1000, "clients-sessions: sessions of each client (TTL -session-ttl, window -keepalive)")
	fs.IntVar(&c.ClientCreateWorkers, "client-create-workers", 400, "clients-sessions: concurrent creators of the sessions, spread over the clients")
	fs.IntVar(&c.ClientWatchers, "client-watchers", 100, "clients-watch: watchers of one prefix on each client")
	fs.DurationVar(&c.ClientCreateLimit, "client-create-limit", 3*time.Minute,
		"clients-sessions: time limit of the creation; sessions not created by then are reported and left out")
	callers := fs.String("client-callers", "16,64", "client-put: concurrent callers of each point (spread over 3 clients, one per member)")
	fs.StringVar(&o.shape, "shape", shapeOne, "where the 3 members of each side run: one (in one process, as before), procs (one OS process each, "+
		"loopback TCP, the workers spread over the processes calling their own member in-process: scenarios put, get, lock, inflight (its crash a kill -9); "+
		"each member process's CPU and peak RSS and their sums), or both (each scenario in both shapes, side by side)")
	attackSize := fs.String("attack-size", "full", "client-attacks: full (issue 22's sizes: 2,100 connections, 128 watches, 200 reads, 16 MiB frames, 200,000 sessions...) "+
		"or small (each attack's shape at a fraction of its size: a smoke run)")
	fs.StringVar(&o.memberGoMemLimit, "member-gomemlimit", "", "GOMEMLIMIT for every member process (-shape procs, -soak, scale), in its syntax (e.g. 1300MiB); \"\" = none, the default GC alone")
	sc := &o.scale
	fs.IntVar(&sc.Keys, "scale-keys", 1_000_000, "scale: keys loaded (of -scale-value-size bytes each)")
	fs.IntVar(&sc.ValueSize, "scale-value-size", 1024, "scale: bytes of each loaded value")
	fs.IntVar(&sc.Batch, "scale-batch", 100, "scale: keys per transaction of the load and the growth to the cap")
	fs.IntVar(&sc.LoadWriters, "scale-load-writers", 8, "scale: transactions in flight per member process while loading")
	fs.IntVar(&sc.PutClients, "scale-put-clients", 64, "scale: callers of the put points (empty, loaded, under the memory limit)")
	fs.IntVar(&sc.ListKeys, "scale-list", 100_000, "scale: keys of the paged List")
	fs.IntVar(&sc.ListPage, "scale-list-page", 1000, "scale: keys per page of the List (coord Limit/After, etcd's range limit)")
	fs.IntVar(&sc.WatchBack, "scale-watch-back", 50_000, "scale: changes back the watch starts from (written just before it, one put each)")
	fs.IntVar(&sc.Sessions, "scale-sessions", 100_000, "scale: sessions held through the clients (TTL -session-ttl; sessions and watches "+
		"created by -client-create-workers at once, none started after -client-create-limit)")
	fs.IntVar(&sc.Watches, "scale-watches", 500_000, "scale: watches held through the clients, each of a prefix of its own")
	fs.IntVar(&sc.Clients, "scale-clients", 100, "scale: clients holding the sessions and watches (client i on member i%3)")
	fs.DurationVar(&sc.Settle, "scale-settle", 3*time.Minute, "scale: at most this long, wait for the members' CPU to fall to idle after the loaded points, then run the put point again; 0 = skip")
	fs.DurationVar(&sc.Hold, "scale-hold", 30*time.Second, "scale: how long the sessions and watches are held while measured")
	fs.StringVar(&sc.Quota, "scale-quota", "", "scale: the keyspace cap the cell grows to, e.g. 64MiB (coord QuotaBytes, etcd QuotaBackendBytes); \"\" = each side's default (2 GiB)")
	fs.StringVar(&sc.GoMemLimit, "scale-gomemlimit", "1.25x", "scale: the memory limit of the second memory figure, set in each member after the default-GC one "+
		"(debug.SetMemoryLimit, what GOMEMLIMIT sets): Nx = N times the live data loaded, or bytes in GOMEMLIMIT's syntax; off = skip")
	fs.DurationVar(&sc.Limit, "scale-limit", 4*time.Hour, "scale: time limit of each side's run")
	fs.StringVar(&sc.MemFloor, "scale-mem-floor", "3GiB", "scale: the growth to the cap stops, reported, while the machine has less memory available than this "+
		"(MemAvailable; the machine is shared); \"\" = no floor")
	so := &o.soak
	fs.DurationVar(&so.duration, "soak", 0, "run the soak for this long instead of the scenarios: for each of -sides at the same time, 3 member processes over TCP on loopback with the load inside them (see the package doc)")
	fs.DurationVar(&so.interval, "soak-interval", time.Minute, "soak: time between report lines")
	fs.StringVar(&so.out, "soak-out", "soak.json", "soak: the JSON results file (rewritten every interval)")
	fs.Float64Var(&so.putRate, "soak-put-rate", 300, "soak: puts per second, all processes together")
	fs.IntVar(&so.keys, "soak-keys", 5000, "soak: keys the puts write over")
	fs.Float64Var(&so.sessionRate, "soak-session-rate", 20, "soak: sessions created and closed per second, all processes together")
	fs.Float64Var(&so.lockRate, "soak-lock-rate", 20, "soak: lock cycles (Lock, Unlock) per second, all processes together")
	fs.IntVar(&so.lockNames, "soak-locks", 3, "soak: lock names the cycles use (shared by the processes)")
	fs.IntVar(&so.lockSessions, "soak-lock-sessions", 4, "soak: sessions each process holds the locks with")
	fs.IntVar(&so.watchers, "soak-watchers", 5, "soak: watchers of the put prefix in each process")
	fs.BoolVar(&so.keep, "soak-keep", false, "soak: keep the members' data directories")
	fs.StringVar(&o.child, childFlag, "", "")
	fs.BoolVar(&o.member, memberFlag, false, "")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./bench [flags]\n\n"+
			"Runs each scenario on coord and on embedded etcd, each side in its own child process,\n"+
			"and prints both with the ratio coord/etcd. Scenarios:\n")
		for _, s := range scenario.All {
			fmt.Fprintf(stderr, "  %-15s %s\n", s.Name, s.Doc)
		}
		fmt.Fprintf(stderr, "Every run also reports each side's peak RSS (scenario 7).\n\nFlags:\n")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name == childFlag || f.Name == memberFlag {
				return
			}
			fmt.Fprintf(stderr, "  -%s (default %q)\n    \t%s\n", f.Name, f.DefValue, f.Usage)
		})
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.member {
		return o, nil
	}
	if *compare != "" {
		if o.compareRuns = strings.Split(*compare, ","); len(o.compareRuns) != 2 {
			return nil, fmt.Errorf("-compare-runs %q: want two results files, A.json,B.json", *compare)
		}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var err error
	if o.scenarios, err = parseScenarios(*scen, c.SessionsLarge > 0); err != nil {
		return nil, err
	}
	switch o.shape {
	case shapeOne, shapeBoth:
	case shapeProcs:
		if *scen == "all" {
			o.scenarios = slices.DeleteFunc(o.scenarios, func(n string) bool { return !procsScenarios[n] })
		}
		for _, n := range o.scenarios {
			if !procsScenarios[n] {
				return nil, fmt.Errorf("-shape procs runs put, get, lock, sessions, inflight, client-attacks and scale, not %s", n)
			}
		}
	default:
		return nil, fmt.Errorf("-shape %q: want one, procs or both", o.shape)
	}
	switch *attackSize {
	case "full":
		o.attack = attack.Full()
	case "small":
		o.attack = attack.Small()
	default:
		return nil, fmt.Errorf("-attack-size %q: want full or small", *attackSize)
	}
	if err := o.scale.check(); err != nil {
		return nil, err
	}
	if o.sides, err = parseSides(*sides); err != nil {
		return nil, err
	}
	if o.etcdClient, err = etcdcell.ParseClientMode(*etcdClient); err != nil {
		return nil, err
	}
	if c.StopMode, err = cell.ParseStopMode(*stop); err != nil {
		return nil, err
	}
	c.InflightStops = nil
	for _, s := range strings.Split(*inflightStops, ",") {
		m, err := cell.ParseStopMode(s)
		if err != nil {
			return nil, fmt.Errorf("-inflight-stop: %w", err)
		}
		if !slices.Contains(c.InflightStops, m) {
			c.InflightStops = append(c.InflightStops, m)
		}
	}
	if c.PutClients, err = parseInts(*clients); err != nil {
		return nil, fmt.Errorf("-clients: %w", err)
	}
	if c.ClientCallers, err = parseInts(*callers); err != nil {
		return nil, fmt.Errorf("-client-callers: %w", err)
	}
	if o.rounds < 1 {
		return nil, errors.New("-rounds must be at least 1")
	}
	if so.duration < 0 || so.interval <= 0 {
		return nil, errors.New("-soak and -soak-interval must be positive")
	}
	if so.putRate < 0 || so.sessionRate < 0 || so.lockRate < 0 {
		return nil, errors.New("-soak-*-rate must not be negative")
	}
	for name, v := range map[string]int{"soak-keys": so.keys, "soak-locks": so.lockNames, "soak-lock-sessions": so.lockSessions} {
		if v < 1 {
			return nil, fmt.Errorf("-%s must be at least 1", name)
		}
	}
	if so.watchers < 0 {
		return nil, errors.New("-soak-watchers must not be negative")
	}
	for name, v := range map[string]int{"get-clients": c.GetClients, "get-keys": c.GetKeys,
		"lock-holders": c.LockHolders, "create-workers": c.CreateWorkers, "failover-rounds": c.FailoverRounds,
		"inflight-writers": c.InflightWriters, "inflight-cells": c.InflightCells,
		"watchers": c.Watchers, "watch-puts": c.WatchPuts, "sessions": c.Sessions,
		"client-count": c.Clients, "client-sessions": c.ClientSessions, "client-create-workers": c.ClientCreateWorkers, "client-watchers": c.ClientWatchers} {
		if v < 1 {
			return nil, fmt.Errorf("-%s must be at least 1", name)
		}
	}
	return o, nil
}

func scenarioNames() string {
	var names []string
	for _, s := range scenario.All {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

// parseScenarios expands "all" (which includes sessions-large only when
// large is set, and no ProcsOnly scenario) and checks the names.
func parseScenarios(s string, large bool) ([]string, error) {
	if s == "all" {
		var out []string
		for _, sc := range scenario.All {
			if (sc.Name != "sessions-large" || large) && !sc.ProcsOnly {
				out = append(out, sc.Name)
			}
		}
		return out, nil
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		if _, err := scenario.ByName(name); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, nil
}

func parseSides(s string) ([]string, error) {
	var out []string
	for _, side := range strings.Split(s, ",") {
		if side != "coord" && side != "etcd" {
			return nil, fmt.Errorf("unknown side %q: want coord or etcd", side)
		}
		out = append(out, side)
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
