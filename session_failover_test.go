package coord_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// coordtest's timing: 10 ms ticks, 20 per election timeout.
const testElectionTimeout = 200 * time.Millisecond

// failoverResult counts, over a run of leader changes, the sessions held
// on healthy, connected members that ended anyway.
type failoverResult struct {
	changes, sessions, falseExpiries int
}

// runFailovers makes rounds leader changes in a 3-member cell, each by
// crashing the leader or cutting it off (alternately), with perMember
// sessions of the given TTL on each of the two other members. Those
// members stay up and connected, so every one of their sessions that
// ends is a false expiry.
func runFailovers(t *testing.T, seed int64, ttl time.Duration, rounds, perMember int) failoverResult {
	c := coordtest.NewCluster(t, 3, coordtest.WithSeed(seed))
	ctx := ctxT(t, time.Duration(rounds)*(6*ttl+20*time.Second))
	var res failoverResult
	for round := range rounds {
		leader := c.LeaderIndex()
		var held []*coord.Session
		for i := range 3 {
			if i == leader {
				continue
			}
			for range perMember {
				s, err := c.Node(i).NewSession(ctx, coord.WithTTL(ttl))
				require.NoError(t, err, "seed %d", seed)
				held = append(held, s)
			}
		}
		// Each session's first keep-alive confirmed: Until moves on.
		for _, s := range held {
			u := s.Until()
			require.Eventually(t, func() bool { return s.Until().After(u) || s.Err() != nil },
				10*time.Second, 5*time.Millisecond, "seed %d: no keep-alive confirmed", seed)
		}
		crash := round%2 == 0
		if crash {
			c.Crash(leader)
		} else {
			c.Isolate(leader)
		}
		res.changes++
		require.Eventually(t, func() bool { return c.LeaderIndex() != leader }, 20*time.Second, 5*time.Millisecond,
			"seed %d: no new leader", seed)
		// Two TTLs after the new leader: a false expiry would have
		// happened by then (the new leader grants a full TTL).
		end := time.Now().Add(2 * ttl)
		for time.Now().Before(end) && ctx.Err() == nil {
			time.Sleep(ttl / 10) // sampling the sessions over a fixed window is the point
		}
		for _, s := range held {
			res.sessions++
			if err := s.Err(); err != nil {
				require.ErrorIs(t, err, coord.ErrSessionExpired, "seed %d", seed)
				res.falseExpiries++
				t.Logf("seed %d round %d: session %d on %s ended: %v", seed, round, s.ID(), s.Node().Status().Name, err)
			} else {
				require.NoError(t, s.Close(ctx), "seed %d", seed)
			}
		}
		if crash {
			c.Restart(leader)
		} else {
			c.Heal()
		}
		// Every member follows one leader again before the next round.
		require.Eventually(t, func() bool {
			l := c.LeaderIndex()
			st := c.Node(l).Status()
			for i := range 3 {
				if o := c.Node(i).Status(); o.Leader != st.Name || o.Term != st.Term {
					return false
				}
			}
			return true
		}, 20*time.Second, 10*time.Millisecond, "seed %d: the cell did not settle", seed)
	}
	return res
}

// TestSessionsSurviveFailoverAtMinimumTTL: at MinSessionTTL, sessions on
// members that stay healthy survive every change of leader (crash or
// isolation of the leader). The sweep over TTLs and many seeds runs with
// -soak (or COORD_SOAK).
func TestSessionsSurviveFailoverAtMinimumTTL(t *testing.T) {
	t.Parallel()
	seed := rand.Int64()
	if v := os.Getenv("COORD_TEST_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (replay with COORD_TEST_SEED=%d)", seed, seed)
	// In virtual time: the sessions' 800 ms must be the cell's to keep,
	// not the machine's scheduler's to lose.
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 1)
		minTTL := c.Node(0).MinSessionTTL()
		res := runFailovers(t, seed, minTTL, 4, 4)
		t.Logf("TTL %v: %d false expiries of %d sessions over %d leader changes", minTTL, res.falseExpiries, res.sessions, res.changes)
		require.Zero(t, res.falseExpiries, "seed %d", seed)
	})
}

// TestSessionFailoverSweep measures false expiries against leader changes
// for TTLs from the minimum up, over many seeds. It runs only with -soak
// (or COORD_SOAK); run it beside other load to see a busy machine.
func TestSessionFailoverSweep(t *testing.T) {
	t.Parallel()
	if *soak == 0 && os.Getenv("COORD_SOAK") == "" {
		t.Skip("the sweep runs with -soak or COORD_SOAK")
	}
	seeds := 6
	if v, err := strconv.Atoi(os.Getenv("COORD_SWEEP_SEEDS")); err == nil && v > 0 {
		seeds = v
	}
	multiples := []float64{3, 3.5, 4, 5}
	if v := os.Getenv("COORD_SWEEP_MULTIPLES"); v != "" {
		multiples = nil
		for _, f := range strings.Split(v, ",") {
			m, err := strconv.ParseFloat(f, 64)
			require.NoError(t, err)
			multiples = append(multiples, m)
		}
	}
	var table []string
	for _, m := range multiples {
		ttl := time.Duration(m * float64(testElectionTimeout))
		var total failoverResult
		for range seeds {
			seed := rand.Int64()
			var res failoverResult
			ok := t.Run(fmt.Sprintf("%.1fx/seed=%d", m, seed), func(t *testing.T) {
				c := coordtest.NewCluster(t, 1)
				if ttl < c.Node(0).MinSessionTTL() {
					t.Skipf("TTL %v is below the minimum", ttl)
				}
				res = runFailovers(t, seed, ttl, 6, 4)
			})
			if !ok {
				continue
			}
			total.changes += res.changes
			total.sessions += res.sessions
			total.falseExpiries += res.falseExpiries
		}
		table = append(table, fmt.Sprintf("TTL %.1f x election timeout (%v): %d false expiries of %d sessions over %d leader changes",
			m, ttl, total.falseExpiries, total.sessions, total.changes))
	}
	t.Log("\n" + strings.Join(table, "\n"))
}

// TestPausedLeaderExpiresNothingOnWake: a leader frozen for longer than
// the TTL wakes with a deadline table that went stale while a new leader
// kept the sessions alive. Its first tick decides expiries while it still
// believes it leads; its Raft, meanwhile, hears of the newer term and
// forwards those proposals to the new leader. They carry the old term, so
// the cell refuses them, and the sessions held on the other members live.
func TestPausedLeaderExpiresNothingOnWake(t *testing.T) {
	t.Parallel()
	synctest.Test(t, pausedLeaderExpiresNothingOnWake) // in virtual time, as above
}

func pausedLeaderExpiresNothingOnWake(t *testing.T) {
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	ttl := c.Node(0).MinSessionTTL()
	for round := range 3 {
		leader := c.LeaderIndex()
		var held []*coord.Session
		for i := range 3 {
			if i != leader {
				s, err := c.Node(i).NewSession(ctx, coord.WithTTL(ttl))
				require.NoError(t, err)
				held = append(held, s)
			}
		}
		for _, s := range held {
			u := s.Until()
			require.Eventually(t, func() bool { return s.Until().After(u) }, 10*time.Second, 5*time.Millisecond)
		}
		c.Pause(leader)
		woke := time.Now().Add(ttl + 2*testElectionTimeout)
		for time.Now().Before(woke) {
			time.Sleep(testElectionTimeout / 4) // the pause is a fixed span by design: longer than the TTL
		}
		c.Resume(leader)
		end := time.Now().Add(ttl)
		for time.Now().Before(end) {
			for _, s := range held {
				require.NoError(t, s.Err(), "round %d: session %d ended after the old leader woke", round, s.ID())
			}
			time.Sleep(10 * time.Millisecond) // sampling over the window after the wake
		}
		for _, s := range held {
			require.NoError(t, s.Close(ctx))
		}
	}
}

// TestExpiryIsLogged: the leader that expires a session logs one INFO
// line naming it, its owner member, how long ago it was last heard and
// its TTL; the holder's member logs one when the session ends there.
func TestExpiryIsLogged(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := coordtest.NewCluster(t, 3, coordtest.WithLogger(logger))
	ctx := ctxT(t, 20*time.Second)
	leader := c.LeaderIndex()
	holder := (leader + 1) % 3
	s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(time.Second))
	require.NoError(t, err)
	u := s.Until()
	require.Eventually(t, func() bool { return s.Until().After(u) }, 10*time.Second, 5*time.Millisecond)
	c.Isolate(holder)
	<-s.Done()
	lines := func(msg string) []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=INFO") && strings.Contains(l, fmt.Sprintf("msg=%q", msg)) &&
				strings.Contains(l, fmt.Sprintf("session=%d ", s.ID())) {
				out = append(out, l)
			}
		}
		return out
	}
	// Done closes as the session ends, just before the holder logs why.
	require.Eventually(t, func() bool {
		return len(lines("session expired here: no keep-alive confirmed in time")) > 0
	}, 10*time.Second, 10*time.Millisecond, "the holder's line")
	require.Len(t, lines("session expired here: no keep-alive confirmed in time"), 1, "the holder's line, once")
	require.Eventually(t, func() bool { return len(lines("session expired")) > 0 }, 10*time.Second, 10*time.Millisecond)
	got := lines("session expired")
	require.Len(t, got, 1, "one line on the deciding leader")
	require.Contains(t, got[0], "owner="+c.Name(holder))
	require.Contains(t, got[0], "ttl=1s")
	require.Contains(t, got[0], "last_heard_ago=")
	t.Log(got[0])
}

// lockedBuffer is a bytes.Buffer for a logger written from many
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
