package coord_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestElectionCampaignResignProclaim walks an election through its API:
// Leader when vacant, Campaign, TryCampaign against a leader, Proclaim by
// the leader and by a follower, Resign, and a waiting candidate taking
// over; every new leader's token is greater than the last.
func TestElectionCampaignResignProclaim(t *testing.T) {
	t.Parallel() // waits on conditions only, so other tests' load cannot fail it
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	const group = "g"
	probe := coord.ProbeElection(group, members(c)...)
	defer probe.Close()
	s1 := newSession(t, ctx, c.Node(0), 2*time.Second)
	s2 := newSession(t, ctx, c.Node(1), 2*time.Second)
	e1, e2 := coord.NewElection(s1, group), coord.NewElection(s2, group)
	reader := coord.NewElection(newSession(t, ctx, c.Node(2), 2*time.Second), group)

	l, err := reader.Leader(ctx)
	require.ErrorIs(t, err, coord.ErrNoLeader)
	require.True(t, l.Vacant)

	t1, err := e1.Campaign(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, t1, e1.Token())
	ok, tok, err := e2.TryCampaign(ctx, "b")
	require.NoError(t, err)
	require.False(t, ok)
	require.Zero(t, tok)
	l, err = reader.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, coord.Leader{Value: "a", Token: t1, Session: s1.ID(), Key: l.Key}, l)

	require.NoError(t, e1.Proclaim(ctx, "a2"))
	l, err = reader.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "a2", l.Value)
	require.Equal(t, t1, l.Token, "Proclaim keeps the leadership and its token")
	require.ErrorIs(t, e2.Proclaim(ctx, "b"), coord.ErrNotLeader)
	require.ErrorIs(t, e2.Resign(ctx), coord.ErrNotLeader)

	res := async(ctx, func(ctx context.Context) (coord.Token, error) { return e2.Campaign(ctx, "b") })
	waitParked(t, ctx, probe, 1)
	require.NoError(t, e1.Resign(ctx))
	r := recv(t, ctx, res)
	require.NoError(t, r.err)
	require.Greater(t, r.token, t1)
	l, err = reader.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, coord.Leader{Value: "b", Token: r.token, Session: s2.ID(), Key: l.Key}, l)
	require.ErrorIs(t, e1.Proclaim(ctx, "stale"), coord.ErrNotLeader, "a resigned leader cannot proclaim")
	require.ErrorIs(t, e1.Resign(ctx), coord.ErrNotLeader)

	// Leaders come and go; each token is greater than the one before.
	last := r.token
	cur := e2
	for i := range 4 {
		require.NoError(t, cur.Resign(ctx))
		next := []*coord.Election{e1, e2}[i%2]
		ok, tok, err := next.TryCampaign(ctx, fmt.Sprint(i))
		require.NoError(t, err)
		require.True(t, ok, "TryCampaign on a vacant group leads")
		require.Greater(t, tok, last)
		last, cur = tok, next
	}

	// Losing the leadership (the session closed) ends it; Done says so.
	done := cur.Done()
	if cur == e1 {
		require.NoError(t, s1.Close(ctx))
	} else {
		require.NoError(t, s2.Close(ctx))
	}
	recv(t, ctx, done)
	require.ErrorIs(t, cur.Proclaim(ctx, "gone"), coord.ErrNotLeader)
	_, err = reader.Leader(ctx)
	require.ErrorIs(t, err, coord.ErrNoLeader)
}

// TestElectionObserve watches an election from a third member: the
// current state first, then leader -> proclaimed value -> vacant -> new
// leader, in order and without repeats; a session that held two
// candidacies ending in one change (the state in between never existed
// and is never reported); a burst of changes while the observer is not
// receiving (reported in order, losslessly); and the observer's member
// coming back by a snapshot after the changes it missed left the short
// history: Observe reads the group again and goes on. (etcd's Observe
// never reports vacancy, can report a wrong leader (etcd#18163) and dies
// on compaction (etcd#7815).)
func TestElectionObserve(t *testing.T) {
	t.Parallel() // waits on conditions only, so other tests' load cannot fail it
	const history = 16
	c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		cfg.HistoryRevisions = history
		cfg.CompactEvery = 50
		cfg.CatchUpEntries = 10
	}))
	ctx := ctxT(t, 60*time.Second) // a bound for a stuck test, not a speed target: the run does about 200 writes
	const group = "obs"
	probe := coord.ProbeElection(group, members(c)...)
	defer probe.Close()
	// The observer is on a follower, which is cut off later.
	leader := c.LeaderIndex()
	o, a, b := (leader+1)%3, leader, (leader+2)%3
	s1 := newSession(t, ctx, c.Node(a), 2*time.Second)
	s2 := newSession(t, ctx, c.Node(b), 2*time.Second)
	e1, e2 := coord.NewElection(s1, group), coord.NewElection(s2, group)
	octx, stop := context.WithCancel(ctx)
	obs := coord.NewElection(newSession(t, ctx, c.Node(o), 2*time.Second), group).Observe(octx)
	next := func() coord.Leader { t.Helper(); return recv(t, ctx, obs) }

	require.Equal(t, coord.Leader{Vacant: true}, next(), "the current state first")
	t1, err := e1.Campaign(ctx, "a")
	require.NoError(t, err)
	l := next()
	require.Equal(t, "a", l.Value)
	require.Equal(t, t1, l.Token)
	require.Equal(t, s1.ID(), l.Session)
	require.NoError(t, e1.Proclaim(ctx, "a2"))
	require.Equal(t, coord.Leader{Value: "a2", Token: t1, Session: s1.ID(), Key: l.Key}, next())
	require.NoError(t, e1.Resign(ctx))
	require.Equal(t, coord.Leader{Vacant: true}, next())
	t2, err := e2.Campaign(ctx, "b")
	require.NoError(t, err)
	require.Greater(t, t2, t1)
	l = next()
	require.Equal(t, coord.Leader{Value: "b", Token: t2, Session: s2.ID(), Key: l.Key}, l)
	require.Equal(t, mustLeader(t, ctx, e1), l)

	// s2 also queues a second candidacy; closing s2 deletes both keys in
	// one revision: the observer goes from b straight to vacant, never
	// through the second candidacy.
	second := coord.NewElection(s2, group)
	res := async(ctx, func(ctx context.Context) (coord.Token, error) { return second.Campaign(ctx, "b-second") })
	waitParked(t, ctx, probe, 1)
	require.NoError(t, s2.Close(ctx))
	require.ErrorIs(t, recv(t, ctx, res).err, coord.ErrSessionClosed)
	require.Equal(t, coord.Leader{Vacant: true}, next())

	// A burst while the observer does not receive: e3 leads and proclaims
	// many values, and resigns. The observer then reports e3's values in
	// order, none twice, then vacant.
	s3 := newSession(t, ctx, c.Node(a), 2*time.Second)
	e3 := coord.NewElection(s3, group)
	t3, err := e3.Campaign(ctx, "v0")
	require.NoError(t, err)
	const burst = 100
	for i := 1; i <= burst; i++ {
		require.NoError(t, e3.Proclaim(ctx, fmt.Sprintf("v%d", i)))
	}
	require.NoError(t, e3.Resign(ctx))
	lastValue := -1
	for {
		l := next()
		if l.Vacant {
			break
		}
		require.Equal(t, t3, l.Token)
		var v int
		_, err := fmt.Sscanf(l.Value, "v%d", &v)
		require.NoError(t, err)
		require.Greater(t, v, lastValue, "values in order, none twice")
		lastValue = v
	}
	require.Equal(t, burst, lastValue, "the last value is reported")

	// Across a compaction: the observer's member is cut off while e4
	// leads, proclaims and churns far past the retained history, and
	// resigns; it comes back by a snapshot, its watch cannot resume, and
	// Observe reads the group again: leader -> vacant -> new leader.
	s4 := newSession(t, ctx, c.Node(a), 5*time.Second)
	e4 := coord.NewElection(s4, group)
	t4, err := e4.Campaign(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, coord.Leader{Value: "x", Token: t4, Session: s4.ID(), Key: mustLeader(t, ctx, e4).Key}, next())
	c.Isolate(o)
	for i := range 3 * history {
		require.NoError(t, e4.Proclaim(ctx, fmt.Sprintf("x%d", i)))
		_, err := c.Node(b).Put(ctx, "churn", []byte{byte(i)})
		require.NoError(t, err)
	}
	require.NoError(t, e4.Resign(ctx))
	for i := range 100 { // enough for the log to be compacted past the observer's member
		_, err := c.Node(b).Put(ctx, "churn", []byte{byte(i)})
		require.NoError(t, err)
	}
	c.Heal()
	require.Equal(t, coord.Leader{Vacant: true}, next())
	require.Positive(t, probe.Relists(), "the observer's watch could not resume; it read the group again")
	s5 := newSession(t, ctx, c.Node(b), 2*time.Second)
	t5, err := coord.NewElection(s5, group).Campaign(ctx, "d")
	require.NoError(t, err)
	l = next()
	require.Equal(t, "d", l.Value)
	require.Equal(t, t5, l.Token)
	require.Greater(t, t5, t4)

	stop()
	for range obs {
	}
}

func mustLeader(t *testing.T, ctx context.Context, e *coord.Election) coord.Leader {
	t.Helper()
	l, err := e.Leader(ctx)
	require.NoError(t, err)
	return l
}
