package sessions

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// countCell answers every proposal at once and counts what the leader
// wrote: entries, and session IDs carried in them (credits, marks, seen
// marks, expiries).
type countCell struct {
	loaded []Loaded

	mu        sync.Mutex
	proposals int
	ids       int
	kinds     map[command.Kind]int
	at        []int // the tick of each proposal (set by the test through tick)
	tick      int
}

func newCountCell(n int, ttl time.Duration) *countCell {
	c := &countCell{kinds: map[command.Kind]int{}}
	for i := range n {
		c.loaded = append(c.loaded, Loaded{ID: int64(i + 1), TTL: ttl})
	}
	return c
}

func (c *countCell) ReadBarrier(ctx context.Context) error { return ctx.Err() }
func (c *countCell) AppliedIndex() uint64                  { return uint64(len(c.loaded)) + 1000 }
func (c *countCell) Sessions() (time.Duration, []Loaded, error) {
	return 0, c.loaded, nil
}
func (c *countCell) Ack(string, *Ack) {}

func (c *countCell) Propose(_ context.Context, cmd *command.Command) (command.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proposals++
	c.kinds[cmd.Kind]++
	c.at = append(c.at, c.tick)
	if s := cmd.Session; s != nil {
		c.ids += len(s.Credits) + len(s.IDs)
		if cmd.Kind == command.KindSessionEnd {
			c.ids++
		}
	}
	res := command.Result{Status: command.StatusOK}
	if cmd.Kind == command.KindSessionEnd {
		res.SessionID = cmd.Session.ID
	}
	return res, nil
}

func (c *countCell) counts() (proposals, ids int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proposals, c.ids
}

func startCountLeader(t testing.TB, cell Cell) (*Leader, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	l := StartLeader(context.Background(), LeaderConfig{Term: 7, Cell: cell, Clock: clock,
		ElectionTimeout: et, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { l.Stop(); l.Wait() })
	<-l.Ready()
	return l, clock
}

// drained waits until the leader has proposed every decision it took:
// bookkeeping and expiries.
func drained(t testing.TB, l *Leader) {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue) == 0 && !l.proposing && l.expiring == 0
	}, 10*time.Second, time.Millisecond)
}

// visits is how many session entries the table's periodic work has
// looked at so far.
func (l *Leader) visits() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.table.visits
}

// TestTickWorkIndependentOfIdleSessions: once idle sessions have been
// found silent, a tick looks at the sessions that are due, not at every
// session held. 10,000 idle sessions of a long TTL cost a tick what 10
// do.
func TestTickWorkIndependentOfIdleSessions(t *testing.T) {
	visited := map[int]uint64{}
	for _, n := range []int{10, 10_000} {
		cell := newCountCell(n, 1000*time.Hour)
		l, clock := startCountLeader(t, cell)
		// Warm up: long enough for every session to be found silent.
		for range 40 {
			clock.Add(et / 4)
			l.Tick()
		}
		drained(t, l)
		before := l.visits()
		const ticks = 400
		for range ticks {
			clock.Add(et / 4)
			l.Tick()
		}
		visited[n] = l.visits() - before
		t.Logf("%d idle sessions: %d entries visited in %d ticks", n, visited[n], ticks)
	}
	require.LessOrEqual(t, visited[10_000], visited[10]+10,
		"entries visited per tick grow with the sessions held (10: %d, 10,000: %d)", visited[10], visited[10_000])
}

// TestIdleLeaderWritesNoEntryPerSilentSession: a leader holding
// abandoned sessions of a long TTL does not write their unheard time
// into the log every interval. Each silent session is written once (when
// it is found silent), and the entries that keep the replicated time
// moving are few, independent of the sessions held, and further apart
// the longer the term lasts: none at all over the last thousands of
// intervals.
func TestIdleLeaderWritesNoEntryPerSilentSession(t *testing.T) {
	const n = 1000
	cell := newCountCell(n, 1000*time.Hour)
	l, clock := startCountLeader(t, cell)
	const ticks = 24_000 // 10 minutes of et/4 ticks at et = 100 ms
	for i := range ticks {
		cell.mu.Lock()
		cell.tick = i
		cell.mu.Unlock()
		clock.Add(et / 4)
		l.Tick()
		if i%1000 == 0 {
			drained(t, l)
		}
	}
	drained(t, l)
	proposals, ids := cell.counts()
	t.Logf("%d silent sessions over %d ticks: %d entries carrying %d session IDs; kinds %v",
		n, ticks, proposals, ids, cell.kinds)
	require.LessOrEqual(t, ids, n, "session IDs written: each silent session at most once")
	require.LessOrEqual(t, proposals, 40, "entries written in 10 minutes")
	last := 0
	cell.mu.Lock()
	for _, at := range cell.at {
		last = max(last, at)
	}
	cell.mu.Unlock()
	// The gaps grow: the last 5 minutes hold at most one entry.
	late := 0
	cell.mu.Lock()
	for _, at := range cell.at {
		if at >= ticks/2 {
			late++
		}
	}
	cell.mu.Unlock()
	require.LessOrEqual(t, late, 1, "entries in the last 5 minutes (last at tick %d)", last)
}

// BenchmarkLeaderTickIdle measures one tick of a leader holding 200,000
// abandoned sessions of a long TTL: the idle cell's steady cost.
func BenchmarkLeaderTickIdle(b *testing.B) {
	cell := newCountCell(200_000, 1000*time.Hour)
	l, clock := startCountLeader(b, cell)
	for range 40 { // every session found silent
		clock.Add(et / 4)
		l.Tick()
	}
	drained(b, l)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clock.Add(et / 4)
		l.Tick()
	}
	b.StopTimer()
	drained(b, l)
}
