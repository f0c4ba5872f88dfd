package raftnode

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
)

// downReporter is an in-memory transport that reports lost connections
// when the test says so, as the TCP transport does when a peer's process
// dies.
type downReporter struct {
	transport.Transport
	mu sync.Mutex
	f  func(string)
}

func (d *downReporter) OnPeerDown(f func(string)) {
	d.mu.Lock()
	d.f = f
	d.mu.Unlock()
}

func (d *downReporter) report(peer string) {
	d.mu.Lock()
	f := d.f
	d.mu.Unlock()
	f(peer)
}

// newSlowElectionCell starts a cell whose election timeout (20s) no test
// waits out, with member 0 elected at once and every transport a
// downReporter.
func newSlowElectionCell(t *testing.T) (*testCell, []*downReporter) {
	var reps []*downReporter
	c := newTestCell(t, 3, func(cfg *Config) {
		cfg.ElectionTicks = 1000
		r := &downReporter{Transport: cfg.Transport}
		reps = append(reps, r)
		cfg.Transport = r
	})
	c.nodes[0].runOnLoop(func() { require.NoError(t, c.nodes[0].rn.Campaign()) })
	require.Equal(t, 0, c.leader())
	c.put(1, "k", "v")
	return c, reps
}

func TestLostConnectionToCrashedLeaderFailsOverBeforeTimeout(t *testing.T) {
	// Known to miss now and then (about 1 run in 10 on a loaded machine the
	// survivors' turns go wrong and the failover waits the timeout), and no
	// transport reports lost connections yet, so the early election is
	// dormant outside this test. Kept runnable until it is reliable.
	if os.Getenv("COORD_SOAK") == "" {
		t.Skip("fast failover on connection loss is not reliable yet; run with COORD_SOAK=1")
	}
	c, reps := newSlowElectionCell(t)
	old := c.nodes[0].Status().Term
	// The leader's process dies: its links go silent and its connections
	// close.
	c.net.Isolate(c.names[0])
	start := time.Now()
	reps[1].report(c.names[0])
	reps[2].report(c.names[0])
	lead := c.leader(0)
	took := time.Since(start)
	require.NotEqual(t, 0, lead)
	require.Greater(t, c.nodes[lead].Status().Term, old)
	// The election timeout is 20s; a failover by timeout takes at least
	// that long.
	require.Less(t, took, 10*time.Second, "failover waited for the election timeout")
	t.Logf("new leader m%d after %v (election timeout 20s)", lead, took)
	c.put(lead, "after", "failover")
}

func TestLostConnectionToLiveLeaderDisruptsNothing(t *testing.T) {
	c, reps := newSlowElectionCell(t)
	term := c.nodes[0].Status().Term
	// The connections flap but the leader lives and keeps sending: the
	// followers hear from it again and stand for nothing; a pre-vote
	// that goes out before the next heartbeat wins nothing either.
	for round := range 20 {
		reps[1].report(c.names[0])
		reps[2].report(c.names[0])
		c.put(round%3, "flap", "x")
	}
	require.Equal(t, 0, c.leader())
	for i, n := range c.nodes {
		require.Equal(t, term, n.Status().Term, "member %d", i)
	}
}
