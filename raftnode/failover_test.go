package raftnode

import (
	"slices"
	"sync"
	"testing"

	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
)

// downReporter is an in-memory transport that reports closed connections
// and answers Connected as the test says, as the TCP transport does when
// a peer's process dies.
type downReporter struct {
	transport.Transport
	mu   sync.Mutex
	f    func(string)
	lost map[string]bool
}

func (d *downReporter) OnPeerDown(f func(string)) {
	d.mu.Lock()
	d.f = f
	d.mu.Unlock()
}

func (d *downReporter) Connected(peer string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.lost[peer]
}

// closed reports that peer closed its connection; lost says whether no
// connection with it is left (a crash) or one still delivers (a flap).
func (d *downReporter) closed(peer string, lost bool) {
	d.mu.Lock()
	if d.lost == nil {
		d.lost = map[string]bool{}
	}
	d.lost[peer] = lost
	f := d.f
	d.mu.Unlock()
	f(peer)
}

// newSlowElectionCell starts a cell whose election timeout (a million
// ticks, over five hours) no test waits out, so a new leader can only
// come from an early election; member 0 is elected at once and every
// transport is a downReporter.
func newSlowElectionCell(t *testing.T) (*testCell, []*downReporter) {
	var reps []*downReporter
	c := newTestCell(t, 3, func(cfg *Config) {
		cfg.ElectionTicks = 1_000_000
		r := &downReporter{Transport: cfg.Transport}
		reps = append(reps, r)
		cfg.Transport = r
	})
	c.nodes[0].runOnLoop(func() { require.NoError(t, c.nodes[0].rn.Campaign()) })
	require.Equal(t, 0, c.leader())
	c.put(1, "k", "v")
	return c, reps
}

// survivorsByRank returns members 1 and 2 in the order they stand when
// member 0 leads (by ID).
func survivorsByRank(c *testCell) []int {
	s := []int{1, 2}
	slices.SortFunc(s, func(a, b int) int {
		ia, ib := IDFromName(c.names[a]), IDFromName(c.names[b])
		switch {
		case ia < ib:
			return -1
		case ia > ib:
			return 1
		}
		return 0
	})
	return s
}

func TestLostConnectionToCrashedLeaderFailsOverBeforeTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		behind int // rank of the survivor that misses the last write; -1 none
	}{
		{"logs even", -1},
		// The first to stand is refused by the other, still in the
		// leader's lease, and later refuses the other's stale log: it
		// must stand again.
		{"second to stand is behind", 1},
		{"first to stand is behind", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, reps := newSlowElectionCell(t)
			if tc.behind >= 0 {
				lagging := survivorsByRank(c)[tc.behind]
				c.net.Block(c.names[0], c.names[lagging])
				c.put(0, "late", "x")
			}
			old := c.nodes[0].Status().Term
			// The leader's process dies: its links go silent and its
			// connections close.
			c.net.Isolate(c.names[0])
			reps[1].closed(c.names[0], true)
			reps[2].closed(c.names[0], true)
			// With a five-hour election timeout, only the early election
			// can elect anyone within the test's wait.
			lead := c.leader(0)
			require.NotEqual(t, 0, lead)
			require.Greater(t, c.nodes[lead].Status().Term, old)
			c.put(lead, "after", "failover")
			if tc.behind >= 0 {
				require.Equal(t, "x", c.data(lead)["late"], "the new leader lost a committed write")
			}
		})
	}
}

func TestLostConnectionToLiveLeaderDisruptsNothing(t *testing.T) {
	c, reps := newSlowElectionCell(t)
	term := c.nodes[0].Status().Term
	// The connections flap but the leader lives and its connections
	// still deliver: the followers stand for nothing.
	for round := range 20 {
		reps[1].closed(c.names[0], false)
		reps[2].closed(c.names[0], false)
		c.put(round%3, "flap", "x")
	}
	// One follower has lost every connection with the leader and stands
	// again and again; the other still hears the leader and ignores its
	// pre-votes, as does the leader, so the term never moves.
	reps[1].closed(c.names[0], true)
	for round := range 20 {
		c.put(round%3, "half", "x")
	}
	require.Equal(t, 0, c.leader())
	for i, n := range c.nodes {
		require.Equal(t, term, n.Status().Term, "member %d", i)
	}
}
