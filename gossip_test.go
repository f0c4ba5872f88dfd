package coord_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// voters returns the voters the leader's applied configuration lists.
func voterNames(t *testing.T, n *coord.Node) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ms, err := n.Members(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range ms {
		if m.Role == coord.MemberVoter {
			out = append(out, m.Name)
		}
	}
	return out
}

// testLogger logs members' Info (or Debug with COORD_TEST_DEBUG set)
// lines to stderr when COORD_TEST_LOG is set, for diagnosis; else none.
func testLogger() *slog.Logger {
	if os.Getenv("COORD_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	level := slog.LevelInfo
	if os.Getenv("COORD_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond) // polling membership across members; no single event to wait on
	}
}

// TestGossipFormsOneCell starts 7 members at once, none told of the
// others' Raft addresses, with BootstrapExpect 3: one cell forms and
// every member ends in it.
func TestGossipFormsOneCell(t *testing.T) {
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			c := coordtest.NewCluster(t, 7, coordtest.WithGossip(), coordtest.WithWaitTimeout(30*time.Second), coordtest.WithLogger(testLogger()))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := c.Leader().Put(ctx, "k", []byte("v"))
			require.NoError(t, err)
			waitUntil(t, 60*time.Second, "all 7 members in one cell, 5 voting", func() bool {
				l := c.Leader()
				ms, err := l.Members(ctx)
				return err == nil && len(ms) == 7 && len(voterNames(t, l)) == 5
			})
			// Followers learn of the leader from its messages: wait for each.
			waitUntil(t, 30*time.Second, "every member following the one leader", func() bool {
				leader := c.Leader().Status().Name
				for i := range 7 {
					if c.Node(i).Status().Leader != leader {
						return false
					}
				}
				return true
			})
			t.Logf("autopilot: %+v", c.Leader().Autopilot())
		})
	}
}

// TestGossipReplacesDeadVoter kills a voter of 3 (with a standby) and
// sees the autopilot promote the standby and remove the dead voter.
func TestGossipReplacesDeadVoter(t *testing.T) {
	c := coordtest.NewCluster(t, 4, coordtest.WithGossip(), coordtest.WithWaitTimeout(30*time.Second), coordtest.WithLogger(testLogger()),
		coordtest.WithConfig(func(i int, cfg *coord.Config) { cfg.Gossip.Autopilot.Voters = 3 }))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitUntil(t, 60*time.Second, "3 voters and a standby", func() bool {
		ms, err := c.Leader().Members(ctx)
		return err == nil && len(ms) == 4 && len(voterNames(t, c.Leader())) == 3
	})
	l := c.LeaderIndex()
	vs := voterNames(t, c.Node(l))
	victim := -1
	for i := range 4 {
		if i != l && slices.Contains(vs, c.Name(i)) {
			victim = i
			break
		}
	}
	start := time.Now()
	c.Crash(victim)
	waitUntil(t, 60*time.Second, "the dead voter replaced and removed", func() bool {
		ms, err := c.Leader().Members(ctx)
		if err != nil || len(ms) != 3 {
			return false
		}
		return !slices.Contains(voterNames(t, c.Leader()), c.Name(victim)) && len(voterNames(t, c.Leader())) == 3
	})
	t.Logf("dead voter to replacement: %v (threshold 2s + stabilization 1s); autopilot: %+v", time.Since(start), c.Leader().Autopilot())
	_, err := c.Leader().Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
}
