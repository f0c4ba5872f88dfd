package coord_test

import (
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestClientSessionsBoundedPerIdentity: a client identity holds at most
// ClientMaxSessions live sessions in the cell, counted over every member
// (the count is replicated state): one more is refused with
// ErrTooManySessions, creates nothing and is counted; another identity
// and the members' own sessions are not held to it; a closed session
// gives its place back.
func TestClientSessionsBoundedPerIdentity(t *testing.T) {
	t.Parallel()
	const bound = 3
	c := coordtest.NewCluster(t, 3, coordtest.WithClients(), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		cfg.ClientMaxSessions = bound
	}))
	regs := make([]*prometheus.Registry, c.Size())
	for i := range c.Size() {
		regs[i] = prometheus.NewRegistry()
		require.NoError(t, c.Node(i).Admin().RegisterMetrics(regs[i]))
	}
	refused := func() (n float64) {
		for _, reg := range regs {
			n += scrape(t, reg)["coord_sessions_refused_total{client_limit}"]
		}
		return n
	}
	ctx := ctxT(t, 60*time.Second)
	c.Leader()
	as := func(name string, member int) func(*coord.ClientConfig) {
		return func(cfg *coord.ClientConfig) { cfg.Name, cfg.Members = name, []string{c.Name(member)} }
	}
	alice0, alice1 := connect(t, c, as("alice", 0)), connect(t, c, as("alice", 1))
	bob := connect(t, c, as("bob", 0))

	var held []*coord.Session
	for _, cl := range []*coord.Client{alice0, alice0, alice1} {
		s, err := cl.NewSession(ctx, coord.WithTTL(10*time.Second))
		require.NoError(t, err)
		held = append(held, s)
	}
	for _, cl := range []*coord.Client{alice0, alice1} {
		_, err := cl.NewSession(ctx, coord.WithTTL(10*time.Second))
		require.ErrorIs(t, err, coord.ErrTooManySessions, "through member %s", cl.Member())
	}
	require.Equal(t, 2.0, refused(), "each refusal counted")
	for i := range c.Size() {
		require.Eventually(t, func() bool { return coord.OwnerSessions(c.Node(i), "alice") == bound },
			10*time.Second, time.Millisecond, "member %d: the refusals created nothing", i)
	}

	_, err := bob.NewSession(ctx, coord.WithTTL(10*time.Second))
	require.NoError(t, err, "another identity has its own bound")
	for range bound + 2 {
		s, err := c.Node(2).NewSession(ctx, coord.WithTTL(10*time.Second))
		require.NoError(t, err, "a member's own sessions have no such bound")
		require.NoError(t, s.Close(ctx))
	}

	require.NoError(t, held[0].Close(ctx))
	require.Eventually(t, func() bool { return coord.OwnerSessions(c.Node(1), "alice") == bound-1 },
		10*time.Second, time.Millisecond)
	s, err := alice1.NewSession(ctx, coord.WithTTL(10*time.Second))
	require.NoError(t, err, "a closed session gives its place back")
	require.NoError(t, s.Close(ctx))
}
