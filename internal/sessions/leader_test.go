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

// fakeClock is moved by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fakeCell records proposals in log order; a proposal of a kind in gate
// waits until the test releases it.
type fakeCell struct {
	mu       sync.Mutex
	loaded   []Loaded
	log      []*command.Command
	acks     chan *Ack
	gate     map[command.Kind]chan struct{}
	proposed chan command.Kind
}

func newFakeCell(loaded ...Loaded) *fakeCell {
	return &fakeCell{loaded: loaded, acks: make(chan *Ack, 16),
		gate: map[command.Kind]chan struct{}{}, proposed: make(chan command.Kind, 64)}
}

func (c *fakeCell) ReadBarrier(ctx context.Context) error { return ctx.Err() }
func (c *fakeCell) AppliedIndex() uint64                  { return 1000 }
func (c *fakeCell) Sessions() (time.Duration, []Loaded, error) {
	return 0, c.loaded, nil
}
func (c *fakeCell) Ack(to string, ack *Ack) { c.acks <- ack }

func (c *fakeCell) Propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	c.proposed <- cmd.Kind
	c.mu.Lock()
	g := c.gate[cmd.Kind]
	c.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return command.Result{}, ctx.Err()
		}
	}
	c.mu.Lock()
	c.log = append(c.log, cmd)
	c.mu.Unlock()
	res := command.Result{Status: command.StatusOK}
	if cmd.Kind == command.KindSessionEnd {
		res.SessionID = cmd.Session.ID
	}
	return res, nil
}

func (c *fakeCell) kinds() []command.Kind {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []command.Kind
	for _, cmd := range c.log {
		out = append(out, cmd.Kind)
	}
	return out
}

const et = 100 * time.Millisecond

func startLeader(t *testing.T, cell *fakeCell) (*Leader, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	l := StartLeader(context.Background(), LeaderConfig{Term: 7, Cell: cell, Clock: clock,
		ElectionTimeout: et, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { l.Stop(); l.Wait() })
	<-l.Ready()
	return l, clock
}

// A silence mark decided before a keep-alive's seen mark reaches the log
// before it, even when the mark's proposal is slow: otherwise the mark
// would land after the seen mark and undo it, after the holder was acked.
func TestSilenceMarkThenSeenKeepLogOrder(t *testing.T) {
	cell := newFakeCell(Loaded{ID: 5, TTL: 10 * time.Second})
	release := make(chan struct{})
	cell.gate[command.KindSessionSilent] = release
	l, clock := startLeader(t, cell)

	clock.Add(3 * et) // silent for longer than slack and settle: a mark is due
	l.Tick()
	require.Equal(t, command.KindSessionSilent, <-cell.proposed)

	// The holder's keep-alive arrives while the mark is in flight; the
	// table now says its unheard time must be committed as zero first.
	l.KeepAlive("m1", &KeepAlive{Seq: 1, IDs: []int64{5}})
	select {
	case ack := <-cell.acks:
		t.Fatalf("acked %+v before the seen mark was proposed", ack)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	ack := <-cell.acks
	require.Equal(t, []int64{5}, ack.Alive)
	require.Equal(t, []command.Kind{command.KindSessionSilent, command.KindSessionSeen}, cell.kinds())
	for _, cmd := range cell.log {
		require.Equal(t, uint64(7), cmd.Session.Term, "every decision carries the term")
	}
}

// Keep-alives that need seen marks while one is in flight are merged into
// one command, proposed after it.
func TestSeenMarksMerge(t *testing.T) {
	cell := newFakeCell(Loaded{ID: 5, TTL: 10 * time.Second, Unheard: time.Second},
		Loaded{ID: 6, TTL: 10 * time.Second, Unheard: time.Second},
		Loaded{ID: 8, TTL: 10 * time.Second, Unheard: time.Second})
	release := make(chan struct{})
	cell.gate[command.KindSessionSeen] = release
	l, _ := startLeader(t, cell)

	l.KeepAlive("m1", &KeepAlive{Seq: 1, IDs: []int64{5}})
	require.Equal(t, command.KindSessionSeen, <-cell.proposed)
	l.KeepAlive("m2", &KeepAlive{Seq: 1, IDs: []int64{6}})
	l.KeepAlive("m3", &KeepAlive{Seq: 1, IDs: []int64{8}})
	// Give the two keep-alives time to queue behind the first mark; if
	// they have not, they are proposed separately, which is also correct.
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue) == 2
	}, 10*time.Second, time.Millisecond)
	close(release)
	for range 3 {
		<-cell.acks
	}
	log := cell.kinds()
	require.Equal(t, []command.Kind{command.KindSessionSeen, command.KindSessionSeen}, log)
	require.ElementsMatch(t, []int64{6, 8}, cell.log[1].Session.IDs)
}

// Expiry follows the injected clock: a loaded session gets its TTL from
// the election (less its unheard time), and not a moment less.
func TestExpiryFollowsClock(t *testing.T) {
	cell := newFakeCell(Loaded{ID: 5, TTL: time.Second, Unheard: 200 * time.Millisecond})
	l, clock := startLeader(t, cell)

	clock.Add(800*time.Millisecond - time.Nanosecond)
	l.Tick()
	l.mu.Lock()
	d, _ := l.table.Deadline(5)
	l.mu.Unlock()
	require.Equal(t, clock.Now().Add(time.Nanosecond), d, "TTL less unheard time from the election")
	require.NotContains(t, cell.kinds(), command.KindSessionEnd, "not expired before its deadline")
	clock.Add(time.Nanosecond)
	l.Tick()
	for kind := range cell.proposed {
		if kind == command.KindSessionEnd {
			break
		}
	}
	require.Eventually(t, func() bool {
		cell.mu.Lock()
		defer cell.mu.Unlock()
		for _, cmd := range cell.log {
			if cmd.Kind == command.KindSessionEnd {
				return cmd.Session.ID == 5 && cmd.Session.Expired
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
}

// A keep-alive keeps its session from expiring for a TTL from its arrival.
func TestKeepAliveExtendsDeadline(t *testing.T) {
	cell := newFakeCell(Loaded{ID: 5, TTL: time.Second})
	l, clock := startLeader(t, cell)

	clock.Add(900 * time.Millisecond)
	l.KeepAlive("m1", &KeepAlive{Seq: 1, IDs: []int64{5}})
	<-cell.acks
	clock.Add(900 * time.Millisecond) // 1.8 s after the election, 0.9 s after the keep-alive
	l.Tick()
	l.mu.Lock()
	d, ok := l.table.Deadline(5)
	l.mu.Unlock()
	require.True(t, ok)
	require.True(t, d.After(clock.Now()), "deadline %v is not after now %v", d, clock.Now())
	for _, k := range cell.kinds() {
		require.NotEqual(t, command.KindSessionEnd, k)
	}
}
