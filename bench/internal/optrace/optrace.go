// Package optrace reads a runtime execution trace written by the bench's
// -trace and says where its slowest operations waited.
//
// An operation is a region "op" on the goroutine that called it (the
// bench's load workers open one per measured call). Its time splits into
// running, runnable (ready, waiting for a CPU) and blocked (waiting for
// the cell). Around it the trace shows what else ran: the Raft loops'
// waits for a CPU, the fsyncs and who made them, the GC, and which kinds
// of goroutine had the CPUs. The slowest 1% of operations are grouped
// into episodes (overlapping calls), each shown with what ran during it.
package optrace

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// Kinds of goroutine, told apart by the functions on their stacks.
var kinds = []struct{ name, match string }{
	{"callers", "scenario.runLoad"},
	{"raft loop", "raftnode.(*Node).raftLoop"},
	{"raft loop", "etcdserver.(*raftNode).start"},
	{"pebble flush/compaction", "pebble/v2.(*DB).compact"},
	{"pebble flush/compaction", "pebble/v2.(*DB).flush"},
	{"image writer", "storage.(*imageWriter)"},
	{"apply", "etcdserver.(*EtcdServer).applyAll"},
	{"backend (bbolt)", "bbolt"},
	{"transport", "coord/transport"},
	{"transport", "rafthttp"},
	{"GC worker", "runtime.gcBgMarkWorker"},
}

// Kinds of fsync, by the functions on the syncing goroutine's stack.
var syncKinds = []struct{ name, match string }{
	{"raft log (coord WAL)", "coord/storage/wal"},
	{"raft log (etcd WAL)", "etcd/server/v3/storage/wal"},
	{"backend (bbolt)", "bbolt"},
	{"pebble", "pebble"},
}

// Op is one measured call.
type Op struct {
	Start, End                          time.Duration // since the trace's first event
	Running, Runnable, Blocked, Syscall time.Duration
}

// Dur is the call's latency.
func (o Op) Dur() time.Duration { return o.End - o.Start }

type span struct {
	from, to time.Duration
	kind     string
}

// Report is what Read found.
type Report struct {
	Ops       []Op                       // by latency
	Fsyncs    map[string][]time.Duration // by kind of fsync, sorted
	LoopWaits []time.Duration            // the Raft loops' waits for a CPU, sorted
	GCMark    time.Duration              // time in GC mark phases
	GCStop    time.Duration              // time stopped for the GC

	syncs, gc, loopWaits, runs []span
}

type gor struct {
	since time.Duration
	kind  string
	inOp  bool
	op    Op
}

// Read reads the trace from r.
func Read(r io.Reader) (*Report, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("optrace: %w", err)
	}
	rep := &Report{Fsyncs: map[string][]time.Duration{}}
	gs := map[trace.GoID]*gor{}
	inSync := map[trace.GoID]span{}
	ranges := map[string]time.Duration{}
	var t0 trace.Time
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("optrace: %w", err)
		}
		if t0 == 0 {
			t0 = ev.Time()
		}
		now := ev.Time().Sub(t0)
		switch ev.Kind() {
		case trace.EventRegionBegin, trace.EventRegionEnd:
			if ev.Region().Type != "op" {
				continue
			}
			g := gs[ev.Goroutine()]
			if g == nil { // running since before the trace began
				g = &gor{since: now}
				gs[ev.Goroutine()] = g
			}
			g.op.Running += now - g.since // running since its last transition
			g.since = now
			if ev.Kind() == trace.EventRegionBegin {
				g.inOp, g.op = true, Op{Start: now}
			} else if g.inOp {
				g.op.End = now
				rep.Ops = append(rep.Ops, g.op)
				g.inOp = false
			}
		case trace.EventRangeBegin:
			ranges[ev.Range().Name] = now
		case trace.EventRangeEnd:
			name := ev.Range().Name
			if from, ok := ranges[name]; ok {
				delete(ranges, name)
				switch {
				case strings.HasPrefix(name, "stop-the-world"):
					rep.GCStop += now - from
					rep.gc = append(rep.gc, span{from, now, "stop"})
				case strings.Contains(name, "mark"):
					rep.GCMark += now - from
					rep.gc = append(rep.gc, span{from, now, "mark"})
				}
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			id := st.Resource.Goroutine()
			g := gs[id]
			if g == nil {
				g = &gor{}
				gs[id] = g
			}
			from, to := st.Goroutine()
			d := now - g.since
			if g.inOp {
				switch from {
				case trace.GoRunning:
					g.op.Running += d
				case trace.GoRunnable:
					g.op.Runnable += d
				case trace.GoWaiting:
					g.op.Blocked += d
				case trace.GoSyscall:
					g.op.Syscall += d
				}
			}
			if g.kind == "" {
				g.kind = match(ev.Stack(), kinds)
			}
			switch {
			case from == trace.GoRunning:
				rep.runs = append(rep.runs, span{g.since, now, g.kind})
			case from == trace.GoRunnable && to == trace.GoRunning && g.kind == "raft loop":
				rep.LoopWaits = append(rep.LoopWaits, d)
				rep.loopWaits = append(rep.loopWaits, span{g.since, now, ""})
			}
			if to == trace.GoSyscall && isSync(ev.Stack()) {
				inSync[id] = span{from: now, kind: cmp.Or(match(ev.Stack(), syncKinds), "other")}
			}
			if s, ok := inSync[id]; ok && from == trace.GoSyscall {
				s.to = now
				rep.syncs = append(rep.syncs, s)
				rep.Fsyncs[s.kind] = append(rep.Fsyncs[s.kind], s.to-s.from)
				delete(inSync, id)
			}
			g.since = now
		}
	}
	slices.SortFunc(rep.Ops, func(a, b Op) int { return cmp.Compare(a.Dur(), b.Dur()) })
	for _, ds := range rep.Fsyncs {
		slices.Sort(ds)
	}
	slices.Sort(rep.LoopWaits)
	return rep, nil
}

// match returns the first entry of table that a frame of st matches:
// the table's order decides (a caller's stack may pass through the
// transport, a WAL's fsync through Pebble's vfs).
func match(st trace.Stack, table []struct{ name, match string }) string {
	var funcs []string
	for f := range st.Frames() {
		funcs = append(funcs, f.Func)
	}
	for _, k := range table {
		for _, fn := range funcs {
			if strings.Contains(fn, k.match) {
				return k.name
			}
		}
	}
	return ""
}

func isSync(st trace.Stack) bool {
	for f := range st.Frames() {
		if strings.HasSuffix(f.Func, ".Fsync") || strings.HasSuffix(f.Func, ".Fdatasync") {
			return true
		}
	}
	return false
}

func mapKeys[V any](m map[string]V) func(func(string) bool) { return maps.Keys(m) }
