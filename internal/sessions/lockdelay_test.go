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

// delayCell is a fakeCell with lock-delay markers; a delete it is asked
// to propose removes the marker when its guard holds.
type delayCell struct {
	*fakeCell
	dmu     sync.Mutex
	delays  []LockDelay
	delayed map[int64]bool // sessions that own a key asking for a delay
}

func (c *delayCell) SessionLockDelayed(id int64) bool {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	return c.delayed[id]
}

func (c *delayCell) LockDelays() ([]LockDelay, error) {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	return append([]LockDelay(nil), c.delays...), nil
}

func (c *delayCell) Propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	res, err := c.fakeCell.Propose(ctx, cmd)
	if err != nil || cmd.Kind != command.KindTxn {
		return res, err
	}
	c.dmu.Lock()
	defer c.dmu.Unlock()
	for i, d := range c.delays {
		if d.Key == cmd.Txn.Then[0].Key && d.CreateRev == cmd.Txn.If[0].Int {
			c.delays = append(c.delays[:i], c.delays[i+1:]...)
			res.Succeeded = true
			break
		}
	}
	return res, nil
}

func startDelayLeader(t *testing.T, cell *delayCell, term uint64, clock *fakeClock) *Leader {
	t.Helper()
	l := StartLeader(context.Background(), LeaderConfig{Term: term, Cell: cell, Clock: clock,
		ElectionTimeout: et, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { l.Stop(); l.Wait() })
	<-l.Ready()
	return l
}

func noProposal(t *testing.T, cell *delayCell) {
	t.Helper()
	select {
	case k := <-cell.proposed:
		t.Fatalf("proposed %v before the delay passed", k)
	case <-time.After(20 * time.Millisecond):
	}
}

// A marker is deleted, with a term-guarded and revision-guarded delete,
// only once its delay has passed since the leader first saw it; a new
// leader times it again from its own first sight, never shorter.
func TestLockDelayEndsAfterDelay(t *testing.T) {
	const delay = 5 * time.Second
	cell := &delayCell{fakeCell: newFakeCell(), delays: []LockDelay{{Key: "locks/a/d1", CreateRev: 9, Delay: delay}}}
	clock := &fakeClock{now: time.Unix(1000, 0)}

	old := startDelayLeader(t, cell, 7, clock)
	old.Tick() // first sight: armed until now + delay
	clock.Add(delay - time.Nanosecond)
	old.Tick()
	noProposal(t, cell)

	// Leadership moves: the new leader's first sight is later, so its
	// deadline is too, even though the old one's has nearly passed.
	old.Stop()
	old.Wait()
	l := startDelayLeader(t, cell, 8, clock)
	l.Tick()
	clock.Add(delay - time.Nanosecond)
	l.Tick()
	noProposal(t, cell)

	clock.Add(time.Nanosecond)
	l.Tick()
	require.Equal(t, command.KindTxn, <-cell.proposed)
	require.Eventually(t, func() bool { d, _ := cell.LockDelays(); return len(d) == 0 }, 10*time.Second, time.Millisecond)
	cell.mu.Lock()
	cmd := cell.log[len(cell.log)-1]
	cell.mu.Unlock()
	require.Equal(t, uint64(8), cmd.Session.Term, "the delete carries the term")
	require.Equal(t, []command.Compare{{Key: "locks/a/d1", Target: command.TargetCreateRev, Op: command.Equal, Int: 9}}, cmd.Txn.If)
	require.Equal(t, []command.Op{{Type: command.OpDelete, Key: "locks/a/d1"}}, cmd.Txn.Then)

	// A later marker of the same name is timed afresh.
	cell.dmu.Lock()
	cell.delays = []LockDelay{{Key: "locks/a/d1", CreateRev: 12, Delay: delay}}
	cell.dmu.Unlock()
	l.Tick()
	clock.Add(delay / 2)
	l.Tick()
	noProposal(t, cell)
}

// The expiry of a session that owns a key asking for a lock-delay is
// flagged, so the state machine leaves the markers; others are not, so
// they stay readable by members that predate lock-delay.
func TestLockDelayFlagsExpiry(t *testing.T) {
	cell := &delayCell{fakeCell: newFakeCell(Loaded{ID: 5, TTL: time.Second}, Loaded{ID: 6, TTL: time.Second}),
		delayed: map[int64]bool{5: true}}
	clock := &fakeClock{now: time.Unix(1000, 0)}
	l := startDelayLeader(t, cell, 7, clock)
	clock.Add(time.Second + 3*et)
	l.Tick()
	require.Eventually(t, func() bool {
		n := 0
		for _, k := range cell.kinds() {
			if k == command.KindSessionEnd {
				n++
			}
		}
		return n == 2
	}, 10*time.Second, time.Millisecond)
	cell.mu.Lock()
	defer cell.mu.Unlock()
	flagged := map[int64]bool{}
	for _, cmd := range cell.log {
		if cmd.Kind == command.KindSessionEnd {
			require.True(t, cmd.Session.Expired)
			flagged[cmd.Session.ID] = cmd.Session.LockDelay
		}
	}
	require.Equal(t, map[int64]bool{5: true, 6: false}, flagged)
}
