// Command bench runs coord and embedded etcd side by side, on the same
// machine and in the same shape (three members in one process, loopback,
// data on disk with fsync, default timings), and prints each figure for
// both with the ratio coord/etcd. From bench/:
//
//	go run ./bench -scenario all
//
// Each scenario runs on each side in its own child process (the program
// re-executes itself with a hidden flag), so the CPU time and peak RSS
// reported are that side's own. Children report JSON on stdout; the
// parent prints the table and writes the JSON file named by -out.
//
// # Interleaved rounds
//
// Each scenario runs in -rounds rounds (default 3), the sides taking
// turns: coord, etcd, coord, etcd... (shape by shape with -shape both),
// so a change in the machine's load between two children lands in one
// round's pair instead of in the ratio. Each side's figure is its median
// over the rounds; coord/etcd is the median of the paired ratios (round
// i of coord over round i of etcd), printed with their range, and a
// figure whose range crosses 1.0x is marked LEVEL: neither side was
// ahead in every round. The JSON rows keep every round's values.
// -rounds 1 runs each side once, as before rounds.
//
// # In-flight writes across a leader's stop
//
//	go run ./bench -scenario inflight -shape both
//
// has -inflight-writers writers (128) on the two followers write one call
// after another, stops the leader (-inflight-stop: crash, then graceful,
// each on -inflight-cells fresh cells), and times every write in flight
// at the stop from the stop to its result: p50/p99/max, how many ended in
// an error and of which class, beside the time to a new leader and to the
// first write after the stop in the same cell (the failover figure), and
// how far the p99 is past that first write (issue 23's target: 50 ms).
// In one process a crash is the failover scenario's (coord: transport
// cut; etcd: HardStop); with -shape procs it is a kill -9 of the
// leader's process. No writer starts a write after the stop (with
// procs: 20 ms after the planned stop, to cover the parent's delay in
// killing), so the in-flight writes meet only the failover's own load.
//
// # One member per process
//
//	go run ./bench -shape procs    # or -shape both, beside the one-process shape
//
// runs put, get, lock, sessions and inflight with each side's three members in three OS
// processes (coord: its TCP transport on loopback; etcd: three embedded
// servers, each called through its in-process v3client), the workers
// dealt over the processes and calling their own member in-process, as a
// user's service would. Each member process's CPU time and peak RSS (its
// rusage) are reported, and their sums, under the scenario name with
// "@procs"; the figures keep the one-process names, so the table lines
// the shapes up. The member processes are the ones the soak uses.
//
// # CPU per operation
//
//	go run ./bench -scenario put,get,lock,sessions -shape procs -clients 64
//
// Every load point reports its CPU per operation (figure ".cpu_us"): in
// one process, the child's CPU time over the measured window divided by
// the successful operations; with -shape procs, the member processes'
// (user + system, from getrusage, the counters /proc/<pid>/stat shows),
// summed over the three, and the leader's alone (".cpu_us.leader"). Each
// process runs its member and its share of the callers, on both sides
// alike. sessions@procs reports what keeping sessions alive costs: each
// process's CPU over an idle window (-duration), then, with its third of
// -sessions sessions created on its own member, over -keepalive; the
// difference per session per second, and per keep-alive interval (coord
// TTL/4, etcd's clientv3 TTL/3). In interleaved rounds like every
// scenario, so the four figures (put, linearizable get, lock cycle,
// keep-alive) come side by side with their paired ranges.
//
// # etcd's client on both sides
//
//	go run ./bench -scenario etcd-put,etcd-get,etcd-lock,client-put -clients 16,64
//
// etcd-put, etcd-get and etcd-lock are put, get and lock with both sides
// driven by an unchanged go.etcd.io/etcd/client/v3 over loopback gRPC:
// on coord's side each member of the cell serves etcdapi on a port of its
// own (package frontcell), on etcd's the members' client URLs. Three
// clients, caller w on client w%3, each given all three endpoints, which
// clientv3 spreads its calls over (round-robin per call, its default);
// -etcd-pinned gives client i member i alone. The same load points as
// put, get and lock (-clients, -get-clients, -lock-holders) and the same
// figures (throughput, p50, p99, CPU per op; fsyncs per put). Locks go
// through etcd's v3lock service (Lock on a lease, Unlock of the key it
// returned), which both sides serve: coord's fair lock behind the front,
// etcd's concurrency.Mutex inside etcd; clientv3's own concurrency.Mutex
// would write plain keys on coord, not take coord's lock. Each holder's
// lease is a concurrency.Session on its client. Beside client-put (coord
// through its own client protocol) the run shows what the gRPC front
// costs against coord's protocol, and against etcd serving the same calls.
//
// # Scale
//
//	go run ./bench -scenario scale -dir /var/tmp            # 1,000,000 keys of 1 KB, each side's 2 GiB cap
//	go run ./bench -scenario scale -scale-keys 20000 -scale-quota 64MiB   # a smoke run
//
// runs issue 27's scale run once per side (only when named: it is long),
// against three member processes (package scale answers in each). On an
// empty cell it takes each member's memory and runs put (-scale-put-clients
// 64), linearizable get and uncontended lock points; loads -scale-keys
// keys of -scale-value-size bytes in transactions of -scale-batch, each
// process a third; takes each member's RSS (with its file pages apart),
// live Go heap (after a GC) and data directory against the live data
// (keys and values loaded), at rest and after the same points run again
// on the loaded cell (their p99 against the empty cell's); waits, at most
// -scale-settle, for every member process to fall idle (under 5% of a
// core over 2 s: coord's compactions of the load done) and runs the put
// point again on the settled cell; sets a memory
// limit in each member (-scale-gomemlimit: 1.25x the live data by
// default, debug.SetMemoryLimit, which is what GOMEMLIMIT sets), runs put
// and get under it and takes the memory again; lists -scale-list keys on
// a follower in pages of -scale-list-page (coord List with Limit and
// After, etcd a range read with a limit), timed, with the member's heap
// and RSS peak; writes -scale-watch-back single puts and watches on a
// follower from the revision before them, timed to the last event; adds
// a fourth member as a learner and times it from its process's start to
// its having applied what the leader had committed (a snapshot, the log
// being compacted; 10 writes a second go on meanwhile, as in a live
// cell), in MB/s of live data; kills a follower's process (kill -9) and
// times its restart to a linearizable read served; holds -scale-sessions
// sessions and -scale-watches watches (each of a prefix of its own)
// through -scale-clients clients in the parent for -scale-hold, with the
// members' CPU and memory, the sessions expired and whether 100 of the
// watches still deliver; then grows the cell to its cap (-scale-quota,
// default each side's 2 GiB; coord's counts keys and values, etcd's its
// database file) and shows, at the cap, every new write refused with the
// quota's error (ErrQuotaExceeded, NOSPACE), deletes done, a linearizable
// get served, and whether a write is taken again after the deletes. The
// growth stops, and says so, while the machine has less memory available
// than -scale-mem-floor. -member-gomemlimit sets GOMEMLIMIT in every
// member process from its start (any -shape procs scenario, the soak).
//
// # Attacks on the client door
//
//	go run ./bench -scenario client-attacks [-attack-size small]
//
// runs issue 22's attacks on a member's client door (package attack),
// coord only, once (its figures are peaks, not rates), against three
// member processes that serve clients on loopback (plaintext, under a
// policy that lets a client named reader-* write nothing: every
// attacker is one), one attack after the other, on the leader's door:
// 2,100 silent TCP connections held and re-dialled for 20 s while honest
// clients connect from the flood's address and from another (127.0.0.2);
// 128 unread watches while 70 values of 64 KiB are put; 200 unread prefix
// reads of a 4 MiB prefix, and of a 3 MiB one whose reply fits a frame;
// four keep-alive frames of one-byte IDs as long as the member reads
// (16 MiB); a transaction of 128 OpGetPrefix("") over 10,000 keys of
// 100 B, then 8 in a row; 200,000 sessions of an hour tried by one
// identity and abandoned, then 200,000 spread over enough identities to
// pass the per-identity bound, each followed by a 10 s idle window (CPU
// and log entries); and 64 MiB of replies asked for, none read, the
// connection half-closed, then the member's Node.Close, timed. Two
// control clients put every 100 ms, one through the attacked door and
// one through another member's. Per attack: each member's peak RSS and
// Go heap over its figures at the attack's start (sampled every 5 ms in
// the member process, after a GC and FreeOSMemory at the start; VmHWM
// reset too), its door counters (Status().Clients: refused or dropped,
// cut off slow or idle), each control's longest gap between commits and
// failed puts, and what the attacker saw (connections held, frames the
// member kept for it, refusals by class, Close's duration). The figures
// are named attacks.<attack>.<figure>; -attack-size small runs every
// attack at a fraction of its size (a smoke run).
//
// # Soak
//
//	go run ./bench -soak 1h [-soak-interval 1m] [-sides coord,etcd] [-dir /disk] [-soak-out soak.json]
//
// runs a steady load for an hour on a coord cell and an etcd cell at the
// same time (-sides picks one or both), so that both see the same
// machine. Each cell's three members run in three OS processes (the
// program re-executed with a hidden flag, package member), over TCP on
// loopback, each with its own data directory under -dir, default
// timings, fsync on. The load runs inside those processes, calling their
// own member in-process as a user's service would: 300 puts/s over 5,000
// keys, 20 sessions/s created and closed, 20 Lock/Unlock cycles/s on 3
// shared locks, 5 watchers of the put prefix per process (the -soak-*
// flags), spread evenly over the processes; each cell gets the whole
// load. Every operation is on an open-loop schedule and its latency runs
// from its due time, so a stall shows as latency instead of as fewer
// operations. Every interval a line per side gives each member's data
// directory size, RSS and CPU, the interval's put p50/p99/max, lock and
// session cycle p99, watch events, errors, and for coord the log
// segments its members started and, of them, those filled on the append
// path (each a stall of the commits behind it; the metric
// coord_raft_log_segments_filled_inline_total). At the end a summary per
// side (data directory first, last and largest; the worst interval's put
// p99), with both sides the put p99 and max of each interval side by side
// against the budget (p99 25 ms, max 100 ms), and the JSON file, which is
// also rewritten every interval. Ctrl-C ends the run early with the
// summary. The member processes die with the parent (Linux:
// PR_SET_PDEATHSIG; everywhere: their stdin closes).
//
// # Where the slowest calls wait
//
//	go run ./bench -scenario put -sides coord,etcd -clients 64 -rounds 1 -trace DIR
//	go run ./bench -trace-report DIR/coord-put.trace
//
// (with more than one round, each round's files are its own: coord-put-r2.trace).
// -trace writes each child's runtime execution trace, each measured call
// a region "op"; -trace-report reads one and splits the calls' latency
// into running, waiting for a CPU and blocked, by latency band, with the
// share of each band that overlapped the GC, a Pebble flush or
// compaction, a Raft loop kept from a CPU, or a slow raft-log fsync; then
// it groups the slowest 1% into episodes and says which goroutines had
// the CPUs in each (package optrace).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/coordcell/coord/bench/internal/optrace"
	"github.com/coordcell/coord/bench/internal/report"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the program, args without the program name; it returns the exit
// code.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.member {
		return runMember(ctx, stdout, stderr)
	}
	if o.traceReport != "" {
		return runTraceReport(o.traceReport, stdout, stderr)
	}
	if o.compareRuns != nil {
		return runCompareRuns(o.compareRuns[0], o.compareRuns[1], stdout, stderr)
	}
	if o.soak.duration > 0 {
		return runSoak(ctx, o, args, stdout, stderr)
	}
	if o.child != "" {
		return runChild(ctx, o, stdout, stderr)
	}
	return runParent(ctx, o, args, stdout, stderr)
}

// runCompareRuns prints whether two full runs' headline points have
// overlapping paired ranges.
func runCompareRuns(a, b string, stdout, stderr io.Writer) int {
	var rows [2][]report.Row
	for i, file := range []string{a, b} {
		data, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		var res results
		if err := json.Unmarshal(data, &res); err != nil {
			fmt.Fprintf(stderr, "bench: %s: %v\n", file, err)
			return 1
		}
		rows[i] = res.Rows
	}
	report.WriteRunComparison(stdout, report.CompareRuns(rows[0], rows[1]))
	return 0
}

// runTraceReport prints where the slowest operations of a trace written
// by -trace waited.
func runTraceReport(file string, stdout, stderr io.Writer) int {
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	defer f.Close()
	rep, err := optrace.Read(bufio.NewReader(f))
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	rep.Write(stdout)
	return 0
}
