package scenario

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// A write is in flight at the stop when it started before it and had not
// ended by it; its latency runs from the stop to its result, and its
// error (if any) is counted by class.
func TestAccountInflight(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	recs := []writeRecord{
		{start: at(-30), end: at(-10)},                                 // ended before the stop
		{start: at(-5), end: at(40)},                                   // in flight: 40 ms
		{start: at(-1), end: at(250), class: cell.ClassAmbiguous},      // in flight, failed: 250 ms
		{start: at(-20), end: at(0)},                                   // ended at the stop itself: in flight, 0 ms
		{start: at(0), end: at(3)},                                     // started at the stop: not in flight
		{start: at(2), end: at(9), class: cell.ClassTimedOut},          // started after it
		{start: at(-7), end: at(7000), class: cell.ClassLeaderChanged}, // in flight, failed
		{start: at(-7), end: at(7001), class: cell.ClassLeaderChanged}, // in flight, failed
	}
	got := accountInflight(t0, recs)
	want := []time.Duration{40 * time.Millisecond, 250 * time.Millisecond, 0, 7000 * time.Millisecond, 7001 * time.Millisecond}
	if len(got.Lat) != len(want) {
		t.Fatalf("in flight: %v, want %v", got.Lat, want)
	}
	for i := range want {
		if got.Lat[i] != want[i] {
			t.Errorf("in flight: %v, want %v", got.Lat, want)
		}
	}
	if len(got.Errors) != 2 || got.Errors[cell.ClassAmbiguous] != 1 || got.Errors[cell.ClassLeaderChanged] != 2 {
		t.Errorf("errors %v, want 1 ambiguous and 2 leader-changed", got.Errors)
	}
}

// A writer remembers its last two writes and every one that ended at or
// after keep, so the write it had in flight at any instant after keep is
// among them.
func TestWritersKeep(t *testing.T) {
	keep := time.Unix(1000, 0)
	at := func(ms int) time.Time { return keep.Add(time.Duration(ms) * time.Millisecond) }
	ws := &inflightWriters{keep: keep, recs: make([][]writeRecord, 1)}
	for i := -5; i < 4; i++ {
		ws.add(0, writeRecord{start: at(i - 1), end: at(i)})
	}
	var ends []int
	for _, r := range ws.wait() {
		ends = append(ends, int(r.end.Sub(keep)/time.Millisecond))
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(ends, want) {
		t.Errorf("kept writes ending at %v ms, want %v", ends, want)
	}
	ws = &inflightWriters{keep: never, recs: make([][]writeRecord, 1)}
	for i := range 5 {
		ws.add(0, writeRecord{start: at(i - 1), end: at(i)})
	}
	if r := ws.wait(); len(r) != 2 || !r[1].end.Equal(at(4)) {
		t.Errorf("keeping only the last two: %v", r)
	}
}

// The figures pool the cells' writes; the first write is the cells'
// median; "over" is the pooled p99 past it; every error class is there,
// 0 when none ended in it.
func TestInflightMetrics(t *testing.T) {
	msd := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	cells := []InflightCell{
		{Lat: msd(10, 20, 30, 40, 50), Errors: map[cell.ErrorClass]int{cell.ClassTimedOut: 2}, Lead: 5 * time.Millisecond, Write: 12 * time.Millisecond},
		{Lat: msd(60, 70, 80, 90, 300), Errors: map[cell.ErrorClass]int{cell.ClassTimedOut: 1, cell.ClassOther: 1}, Lead: 7 * time.Millisecond, Write: 20 * time.Millisecond},
		{Lat: msd(1, 2), Errors: map[cell.ErrorClass]int{}, Write: 16 * time.Millisecond}, // no leader time measured
	}
	got := map[string]float64{}
	for _, m := range InflightMetrics(cell.Crash, 5, cells) {
		if m.Name == "" || m.Label == "" || m.Unit == "" {
			t.Errorf("incomplete metric %+v", m)
		}
		got[m.Name] = m.Value
	}
	for name, want := range map[string]float64{
		"inflight.crash.writes": 12, "inflight.crash.p50": 40, "inflight.crash.p99": 300, "inflight.crash.max": 300,
		"inflight.crash.errors": 4, "inflight.crash.errors.timed-out": 3, "inflight.crash.errors.other": 1,
		"inflight.crash.errors.ambiguous": 0, "inflight.crash.errors.bench-limit": 0,
		"inflight.crash.failover.leader": 5, // the median of the two measured; nearest rank
		"inflight.crash.failover.write":  16,
		"inflight.crash.over":            300 - 16,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	for _, cl := range cell.ErrorClasses {
		if _, ok := got["inflight.crash.errors."+string(cl)]; !ok {
			t.Errorf("no figure for error class %s", cl)
		}
	}
}

// On an in-memory cell whose survivors hold every write from the stop
// until a new leader is known (delay later), each writer has exactly one
// write in flight; each is timed from the stop to its result, at least
// the delay; the errors the cell returns are counted by class; the new
// leader and first write come no sooner than the delay. The leader's
// stop is the mode asked for.
func TestInflightCell(t *testing.T) {
	for _, mode := range []cell.StopMode{cell.Crash, cell.Graceful} {
		t.Run(string(mode), func(t *testing.T) {
			const writers, delay = 12, 30 * time.Millisecond
			c := newStallCell(delay)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := inflightCell(ctx, c, mode, writers, 20*time.Millisecond, 8)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Lat) != writers {
				t.Fatalf("%d writes in flight, want %d: %v", len(res.Lat), writers, res)
			}
			for _, l := range res.Lat {
				if l < delay {
					t.Errorf("a write in flight ended %v after the stop, before the new leader (%v)", l, delay)
				}
			}
			// Writers 0, 4 and 8 get "leader changed".
			if len(res.Errors) != 1 || res.Errors[cell.ClassLeaderChanged] != 3 {
				t.Errorf("errors %v, want 3 leader-changed", res.Errors)
			}
			if res.Lead < delay || res.Write < delay {
				t.Errorf("new leader %v, first write %v: sooner than the cell could (%v)", res.Lead, res.Write, delay)
			}
			if got := c.stopMode(); got != mode {
				t.Errorf("the leader was stopped by %q, want %q", got, mode)
			}
		})
	}
}

// The scenario runs every stop mode on its own fresh cells and reports
// each mode's figures over them.
func TestInflightScenario(t *testing.T) {
	cfg := tiny()
	cfg.InflightStops = []cell.StopMode{cell.Crash, cell.Graceful}
	var opened int
	env := Env{Open: func(context.Context) (cell.Cell, error) {
		opened++
		return newStallCell(10 * time.Millisecond), nil
	}, Logf: t.Logf}
	ms, err := Inflight(context.Background(), env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * cfg.InflightCells; opened != want {
		t.Errorf("%d cells opened, want %d", opened, want)
	}
	got := map[string]float64{}
	for _, m := range ms {
		got[m.Name] = m.Value
	}
	for _, mode := range cfg.InflightStops {
		if n := got["inflight."+string(mode)+".writes"]; n != float64(cfg.InflightWriters*cfg.InflightCells) {
			t.Errorf("%s: %v writes in flight, want %d", mode, n, cfg.InflightWriters*cfg.InflightCells)
		}
		if got["inflight."+string(mode)+".p99"] < 10 || got["inflight."+string(mode)+".failover.write"] < 10 {
			t.Errorf("%s: figures %v", mode, got)
		}
	}
}

// An error after the call's context ended is the bench's limit, whatever
// the cell says it is; a stopped member is ClassStopped; a cell that does
// not classify gives ClassOther.
func TestClassify(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	c := newStallCell(0)
	if got := cell.Classify(ended, c, errFakeLeaderChanged); got != cell.ClassLimit {
		t.Errorf("after the context: %s", got)
	}
	if got := cell.Classify(context.Background(), c, errFakeLeaderChanged); got != cell.ClassLeaderChanged {
		t.Errorf("the cell's own class: %s", got)
	}
	if got := cell.Classify(context.Background(), struct{}{}, cell.ErrStopped); got != cell.ClassStopped {
		t.Errorf("ErrStopped: %s", got)
	}
	if got := cell.Classify(context.Background(), struct{}{}, errors.New("x")); got != cell.ClassOther {
		t.Errorf("no classifier: %s", got)
	}
}

var errFakeLeaderChanged = errors.New("fake: leader changed")

// stallCell is an in-memory cell.Cell led by member 0 whose writes on
// the other members wait, from before the leader's stop, until delay
// after it, when member 1 leads; an in-flight write of a writer whose
// number is a multiple of 4 then fails with errFakeLeaderChanged.
type stallCell struct {
	delay   time.Duration
	mu      sync.Mutex
	leader  int
	stopped [cell.Members]bool
	mode    cell.StopMode
	timer   *time.Timer
	release chan struct{} // closed delay after the stop
}

func newStallCell(delay time.Duration) *stallCell {
	return &stallCell{delay: delay, release: make(chan struct{})}
}

func (c *stallCell) Side() string { return "fake" }

func (c *stallCell) Put(ctx context.Context, m int, key string, _ []byte) error {
	c.mu.Lock()
	stopped := c.stopped[m]
	c.mu.Unlock()
	if stopped {
		return cell.ErrStopped
	}
	select {
	case <-c.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if rest, ok := strings.CutPrefix(key, "bench/inflight/0/"); ok {
		w, _, _ := strings.Cut(rest, "/")
		if n, err := strconv.Atoi(w); err == nil && n%4 == 0 {
			return errFakeLeaderChanged
		}
	}
	return nil
}

func (c *stallCell) Get(context.Context, int, string, bool) error { return nil }

func (c *stallCell) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

func (c *stallCell) LogIndex(context.Context) (uint64, error) { return 0, nil }

func (c *stallCell) Stop(_ context.Context, m int, mode cell.StopMode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped[m], c.leader, c.mode = true, -1, mode
	c.timer = time.AfterFunc(c.delay, func() {
		c.mu.Lock()
		c.leader = 1
		c.mu.Unlock()
		close(c.release)
	})
	return nil
}

func (c *stallCell) stopMode() cell.StopMode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode
}

func (c *stallCell) NewSession(context.Context, int, time.Duration) (cell.Session, error) {
	return nil, errors.New("fake: no sessions")
}

func (c *stallCell) Watch(context.Context, int, string, func(string)) error { return nil }

func (c *stallCell) Close() error { return nil }

func (c *stallCell) Classify(err error) cell.ErrorClass {
	if errors.Is(err, errFakeLeaderChanged) {
		return cell.ClassLeaderChanged
	}
	return cell.ClassOther
}

// With one member per process: two survivors' shares on in-memory
// members that hold every write until delay after the stop. The parent's
// accounting finds each writer's write in flight at the stop, timed from
// it; the first write is a probe started after the stop; the new leader
// is the survivor that says it leads.
func TestInflightShares(t *testing.T) {
	const writers, delay = 5, 30 * time.Millisecond
	release := make(chan struct{})
	var leads atomic.Bool
	ms := []*gatedMember{{release: release}, {release: release, leads: &leads}}
	stopAt := time.Now().Add(50 * time.Millisecond)
	shares := make([]*InflightShareResult, len(ms))
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		sh := InflightShare{Writers: writers, Process: i, ValueSize: 8, StopAt: stopAt.UnixNano(),
			ProbeOffset: time.Duration(i) * time.Millisecond, ProbeEvery: 2 * time.Millisecond, ProbeGuard: 5 * time.Millisecond, HaltGrace: 5 * time.Millisecond}
		wg.Go(func() { shares[i], errs[i] = RunInflightShare(context.Background(), m, sh) })
	}
	time.Sleep(time.Until(stopAt)) // the parent stops the leader at the planned instant
	t0 := time.Now()
	// The second survivor leads at the delay, and takes writes a little
	// after, as a new leader commits its first entry before any write.
	time.AfterFunc(delay, func() { leads.Store(true) })
	time.AfterFunc(delay+10*time.Millisecond, func() { close(release) })
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	res, err := InflightFromShares(t0, shares)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Lat) != 2*writers {
		t.Fatalf("%d writes in flight, want %d: %v", len(res.Lat), 2*writers, res)
	}
	for _, l := range res.Lat {
		if l < delay {
			t.Errorf("a write in flight ended %v after the stop, before the cell could take it (%v)", l, delay)
		}
	}
	if len(res.Errors) != 0 {
		t.Errorf("errors %v", res.Errors)
	}
	if res.Write < delay+10*time.Millisecond || res.Lead < delay {
		t.Errorf("first write %v, new leader %v: sooner than %v", res.Write, res.Lead, delay)
	}
	// A share whose probes never got a write through after the stop
	// cannot say when the cell took writes again.
	if _, err := InflightFromShares(time.Now(), []*InflightShareResult{{Probes: []InflightWrite{{Start: t0.UnixNano(), End: t0.UnixNano()}}}}); err == nil {
		t.Error("no probe after the stop, and no error")
	}
	for _, bad := range []InflightShare{{}, {Writers: 1, StopAt: time.Now().Add(time.Hour).UnixNano(), ProbeEvery: time.Millisecond},
		{Writers: 1, StopAt: time.Now().UnixNano()}} {
		if _, err := RunInflightShare(context.Background(), ms[0], bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// gatedMember is an in-memory cell.Member whose puts wait until release
// closes; it leads once leads (if any) is set.
type gatedMember struct {
	release chan struct{}
	leads   *atomic.Bool
}

func (m *gatedMember) Side() string { return "fake" }
func (m *gatedMember) Put(ctx context.Context, _ string, _ []byte) error {
	select {
	case <-m.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (m *gatedMember) Get(context.Context, string, bool) error { return nil }
func (m *gatedMember) NewSession(context.Context, time.Duration) (cell.Session, error) {
	return nil, errors.New("fake: no sessions")
}
func (m *gatedMember) Watch(context.Context, string, func(string)) error { return nil }
func (m *gatedMember) Close() error                                      { return nil }
func (m *gatedMember) Leads() bool                                       { return m.leads != nil && m.leads.Load() }

// A cell whose start found a port taken is started again; other errors
// are not retried.
func TestWithCellRetriesTakenPort(t *testing.T) {
	taken := errors.New("coord member 2: transport: listen: listen tcp 127.0.0.1:9: bind: address already in use")
	opens := 0
	env := Env{Open: func(context.Context) (cell.Cell, error) {
		if opens++; opens < cell.OpenRetries {
			return nil, taken
		}
		return newStallCell(0), nil
	}}
	if _, err := withCell(context.Background(), env, func(cell.Cell) ([]Metric, error) { return nil, nil }); err != nil || opens != cell.OpenRetries {
		t.Errorf("%d opens, err %v; want %d and none", opens, err, cell.OpenRetries)
	}
	opens = 0
	env.Open = func(context.Context) (cell.Cell, error) { opens++; return nil, errors.New("disk full") }
	if _, err := withCell(context.Background(), env, func(cell.Cell) ([]Metric, error) { return nil, nil }); err == nil || opens != 1 {
		t.Errorf("%d opens, err %v; want 1 and its error", opens, err)
	}
}
