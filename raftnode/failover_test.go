package raftnode

import (
	"bytes"
	"log/slog"
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
	c.nodes[0].runOnLoop(func() { require.NoError(t, c.nodes[0].c.rn.Campaign()) })
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
	t.Parallel()
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
	t.Parallel()
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

// newTCPSlowElectionCell is newSlowElectionCell over real TCP
// transports, which report closed connections themselves.
func newTCPSlowElectionCell(t *testing.T) (*testCell, []*transport.TCP) {
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	trs := make([]*transport.TCP, 3)
	for i := range trs {
		tr, err := transport.ListenTCP(transport.TCPConfig{Name: memberName(i), Addr: "127.0.0.1:0", Logger: log})
		require.NoError(t, err)
		trs[i] = tr
		// Registered before the cell's, so it runs after the members stop.
		t.Cleanup(func() { tr.Close() })
	}
	for _, a := range trs {
		for i, b := range trs {
			a.AddPeer(memberName(i), b.Addr())
		}
	}
	c := newTestCell(t, 3, func(cfg *Config) {
		cfg.ElectionTicks = 1_000_000
		cfg.Transport = trs[slices.Index(c3names, cfg.Name)]
		cfg.Logger = log.With("node", cfg.Name)
	})
	c.nodes[0].runOnLoop(func() { require.NoError(t, c.nodes[0].c.rn.Campaign()) })
	require.Equal(t, 0, c.leader())
	// Through the leader: a write forwarded over a connection still being
	// dialled could be lost, and is retried only after a grace period
	// scaled by the election timeout.
	c.put(0, "k", "v")
	waitFor(t, "every member to follow member 0", func() bool {
		for _, n := range c.nodes {
			if n.Status().Leader != c.nodes[0].id {
				return false
			}
		}
		return true
	})
	return c, trs
}

// syncBuffer collects log lines from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var c3names = []string{memberName(0), memberName(1), memberName(2)}

func TestTCPLeaderKilledFailsOverBeforeTimeout(t *testing.T) {
	t.Parallel()
	c, trs := newTCPSlowElectionCell(t)
	old := c.nodes[0].Status().Term
	// Its process dies: the leader's sockets close. Its member fails (its
	// transport closed under it) and sends nothing more.
	require.NoError(t, trs[0].Close())
	lead := c.leader(0)
	require.NotEqual(t, 0, lead)
	require.Greater(t, c.nodes[lead].Status().Term, old)
	c.put(lead, "after", "failover")
}

func TestTCPLeaderCuttingOneFollowerDisruptsNothing(t *testing.T) {
	t.Parallel()
	c, trs := newTCPSlowElectionCell(t)
	term := c.nodes[0].Status().Term
	// The live leader drops its connections with member 1 and redials it
	// on its next heartbeat. Member 1 may stand meanwhile; member 2 and
	// the leader still hear each other and ignore its pre-votes.
	// Writes go through the leader, as in newTCPSlowElectionCell.
	for range 10 {
		trs[0].RemovePeer(memberName(1))
		trs[0].AddPeer(memberName(1), trs[1].Addr())
		c.put(0, "cut", "x")
	}
	require.Equal(t, 0, c.leader())
	for i, n := range c.nodes {
		require.Equal(t, term, n.Status().Term, "member %d", i)
	}
}
