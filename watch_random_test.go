package coord_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// seen is one event as a watcher received it.
type seen struct {
	rev int64
	typ coord.EventType
	key string
	val string
	end bool
}

func (s seen) String() string {
	return fmt.Sprintf("%d:%s:%s=%s:%v", s.rev, s.typ, s.key, s.val, s.end)
}

// follower is a watcher that survives its member: when its watch ends
// because the member closed, it resumes on another member from LastRev.
type follower struct {
	prefix string
	start  int64
	mu     sync.Mutex
	got    []seen
	err    error
}

func (f *follower) run(ctx context.Context, c *coordtest.Cluster, rng *rand.Rand) {
	from := f.start
	for ctx.Err() == nil {
		n := c.Node(rng.IntN(c.Size()))
		if n == nil {
			continue
		}
		w := n.Watch(ctx, f.prefix, coord.FromRev(from))
		for ev := range w.Events() {
			f.mu.Lock()
			f.got = append(f.got, seen{ev.Rev, ev.Type, ev.KV.Key, string(ev.KV.Value), ev.EndOfRev})
			f.mu.Unlock()
		}
		from = w.LastRev()
		if err := w.Err(); !errors.Is(err, coord.ErrClosed) && !errors.Is(err, context.Canceled) {
			f.mu.Lock()
			f.err = err
			f.mu.Unlock()
			return
		}
	}
}

// TestWatchersSeeExactlyTheHistorySuffix: random writes, transactions and
// session ends, watchers started at random revisions on random members,
// with crashes, restarts and leader changes in between. Every watcher must
// see exactly the suffix of the history after its start revision, each
// revision's events together and the last one marked.
func TestWatchersSeeExactlyTheHistorySuffix(t *testing.T) {
	t.Parallel()
	seed := rand.Int64()
	t.Logf("seed %d", seed)
	c := coordtest.NewCluster(t, 3, coordtest.WithSeed(seed))
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	ctx := ctxT(t, 60*time.Second)
	watchCtx, stopWatchers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var followers []*follower
	startFollower := func(rev int64) {
		f := &follower{prefix: "r/", start: rev}
		followers = append(followers, f)
		frng := rand.New(rand.NewPCG(rng.Uint64(), 8)) // its own: the test's is not shared
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.run(watchCtx, c, frng)
		}()
	}
	node := func() *coord.Node {
		for {
			if n := c.Node(rng.IntN(c.Size())); n != nil {
				return n
			}
		}
	}
	// Writes go through the leader so a crash of another member costs
	// nothing; they retry what certainly did not happen.
	do := func(f func(n *coord.Node) error) {
		for {
			err := f(c.Leader())
			if err == nil || !errors.Is(err, coord.ErrNoQuorum) && !errors.Is(err, coord.ErrClosed) {
				require.NoError(t, err)
				return
			}
		}
	}
	var sessions []*coord.Session
	steps := 150
	for step := range steps {
		key := fmt.Sprintf("r/%d", rng.IntN(8))
		switch op := rng.IntN(10); {
		case op < 4:
			do(func(n *coord.Node) error {
				_, err := n.Put(ctx, key, []byte(fmt.Sprint(step)))
				return err
			})
		case op < 5:
			do(func(n *coord.Node) error { _, err := n.Delete(ctx, key); return err })
		case op < 7:
			do(func(n *coord.Node) error {
				// Another key: a branch may not write one twice.
				second := fmt.Sprintf("r/%d", rng.IntN(8))
				if second == key {
					second = "r/8"
				}
				_, err := n.Txn(ctx).Then(coord.OpPut(key, []byte("t")), coord.OpPut("other", nil),
					coord.OpPut(second, []byte("u"))).Commit()
				return err
			})
		case op < 8:
			s, err := c.Leader().NewSession(ctx, coord.WithTTL(2*time.Second))
			require.NoError(t, err)
			sessions = append(sessions, s)
			do(func(n *coord.Node) error {
				_, err := n.Put(ctx, fmt.Sprintf("r/e%d", len(sessions)), []byte("e"), coord.Ephemeral(s))
				if errors.Is(err, coord.ErrSessionExpired) {
					return nil
				}
				return err
			})
		case op < 9 && len(sessions) > 0:
			s := sessions[rng.IntN(len(sessions))]
			_ = s.Close(ctx) // ends it with all its keys, or it already ended
		default:
			st := node().Status()
			startFollower(rng.Int64N(st.Revision + 1))
		}
		switch step {
		case 50:
			c.Crash(rng.IntN(3))
		case 70:
			for i := range 3 {
				if !c.Running(i) {
					c.Restart(i)
				}
			}
		case 100:
			l := c.LeaderIndex()
			c.Isolate(l)
			for c.LeaderIndex() == l {
			}
			c.Heal()
		}
	}
	startFollower(0)
	// The reference history: every revision from the start, read once
	// everything has settled, from one member.
	final := c.Leader()
	head := final.Status().Revision
	var ref []seen
	w := final.Watch(ctx, "r/", coord.FromRev(0))
	// Every revision of this test touches r/, so the head's shows up.
	for {
		ev := nextEvent(t, w)
		ref = append(ref, seen{ev.Rev, ev.Type, ev.KV.Key, string(ev.KV.Value), ev.EndOfRev})
		if ev.Rev >= head && ev.EndOfRev {
			break
		}
	}
	w.Close()
	last := ref[len(ref)-1].rev
	for _, f := range followers {
		require.Eventually(t, func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.err != nil || len(f.got) > 0 && f.got[len(f.got)-1].rev >= last || f.start >= last
		}, 20*time.Second, 10*time.Millisecond)
	}
	stopWatchers()
	wg.Wait()
	for i, f := range followers {
		require.NoError(t, f.err, "follower %d (seed %d)", i, seed)
		var want []seen
		for _, s := range ref {
			if s.rev > f.start {
				want = append(want, s)
			}
		}
		require.Equal(t, fmt.Sprint(want), fmt.Sprint(f.got),
			"follower %d from revision %d must see exactly the history after it (seed %d)", i, f.start, seed)
	}
	t.Logf("%d followers checked against %d events up to revision %d", len(followers), len(ref), last)
}
