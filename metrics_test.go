package coord_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// scrape gathers reg and returns each unlabelled metric's value, and
// labelled ones as name{value-of-first-label}; a histogram's value is its
// count of observations.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			if ls := m.GetLabel(); len(ls) > 0 {
				name += "{" + ls[0].GetValue() + "}"
			}
			out[name] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

func TestMetricsMoveOnA3MemberCell(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	leader := c.Leader()
	regs := make([]*prometheus.Registry, c.Size())
	for i := range c.Size() {
		regs[i] = prometheus.NewRegistry()
		require.NoError(t, c.Node(i).Admin().RegisterMetrics(regs[i]))
	}
	li := c.LeaderIndex()
	before := scrape(t, regs[li])
	require.Equal(t, 1.0, before["coord_up"])
	require.Equal(t, 1.0, before["coord_raft_is_leader"])
	require.Equal(t, 1.0, before["coord_raft_has_leader"])
	require.Equal(t, 3.0, before["coord_members{voter}"])
	require.Equal(t, 0.0, before["coord_members{learner}"])
	require.Equal(t, float64(2<<30), before["coord_quota_bytes"], "the default quota")
	require.GreaterOrEqual(t, before["coord_raft_leader_changes_total"], 1.0, "the leader saw itself elected")
	require.Positive(t, before["coord_raft_log_entries"])
	follower := c.Name((li + 1) % 3)
	w := leader.Watch(t.Context(), "k")
	<-w.Ready()
	require.Equal(t, 1.0, scrape(t, regs[li])["coord_watchers"])

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 20 {
		_, err := leader.Put(ctx, "k", []byte{byte(i)})
		require.NoError(t, err)
	}
	s, err := leader.NewSession(ctx)
	require.NoError(t, err)
	_, err = coord.NewMutex(s, "m").Lock(ctx)
	require.NoError(t, err)

	for range 20 {
		<-w.Events()
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	_, err = leader.Put(cancelled, "k", nil)
	require.Error(t, err)

	after := scrape(t, regs[li])
	for _, m := range []string{
		"coord_raft_log_sync_duration_seconds", "coord_raft_apply_duration_seconds", "coord_keyspace_bytes",
		"coord_transport_sent_frames_total{" + follower + "}", "coord_transport_sent_bytes_total{" + follower + "}",
		"coord_transport_received_frames_total{" + follower + "}", "coord_transport_received_bytes_total{" + follower + "}",
	} {
		require.Greater(t, after[m], before[m], m)
	}
	require.GreaterOrEqual(t, after["coord_raft_proposals_committed_total"], before["coord_raft_proposals_committed_total"]+22,
		"20 puts, a session, a lock")
	require.Equal(t, before["coord_raft_proposals_failed_total"]+1, after["coord_raft_proposals_failed_total"])
	require.Equal(t, 1.0, after["coord_sessions_created_total"])
	require.GreaterOrEqual(t, after["coord_watch_events_sent_total"], 20.0)
	require.NotContains(t, after, "coord_transport_sent_frames_total{"+leader.Status().Name+"}", "no label for itself")
	require.GreaterOrEqual(t, after["coord_revision"], before["coord_revision"]+20)
	require.Greater(t, after["coord_raft_applied_index"], before["coord_raft_applied_index"])
	require.Greater(t, after["coord_raft_log_syncs_total"], before["coord_raft_log_syncs_total"])
	require.GreaterOrEqual(t, after["coord_raft_log_segments_started_total"], 1.0, "the log's first segment")
	require.Equal(t, 0.0, after["coord_raft_log_segments_filled_inline_total"], "no segment cut on the append path")
	require.Equal(t, 1.0, after["coord_sessions_alive"])
	require.Equal(t, 1.0, after["coord_locks"])
	require.Equal(t, 0.0, after["coord_lock_waiters"])
	// Health is the leader's view of each follower's recent contact, which
	// a loaded machine can delay for a moment: wait for it.
	require.Eventually(t, func() bool {
		return scrape(t, regs[li])["coord_member_health{healthy}"] == 3.0
	}, 10*time.Second, 20*time.Millisecond, "every member healthy")

	// A follower reports a leader it is not, and the same term.
	f := scrape(t, regs[(li+1)%3])
	require.Equal(t, 0.0, f["coord_raft_is_leader"])
	require.Equal(t, after["coord_raft_term"], f["coord_raft_term"])

	// The same metrics are served by the handler.
	code, body := get(t, leader.Handler(coord.WithMetricsGatherer(regs[li])), "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "coord_raft_term ")
	require.Contains(t, body, `coord_members{role="voter"} 3`)
	require.NoError(t, s.Close(ctx))
	require.Zero(t, scrape(t, regs[li])["coord_sessions_expired_total"], "a closed session did not expire")

	// Registering twice is refused, as the registry does for any
	// collector.
	require.Error(t, leader.Admin().RegisterMetrics(regs[li]))
}

func TestMetricsAfterClose(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	n := c.Leader()
	reg := prometheus.NewRegistry()
	require.NoError(t, n.Admin().RegisterMetrics(reg))
	require.NoError(t, n.Close())
	m := scrape(t, reg)
	require.Equal(t, 0.0, m["coord_up"])
}

// A session on a member cut off from the cell enters jeopardy and
// expires, and the member's transport counts what it could not send.
func TestMetricsSessionJeopardyAndExpiry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		li := c.LeaderIndex()
		fi := (li + 1) % 3
		f := c.Node(fi)
		reg := prometheus.NewRegistry()
		require.NoError(t, f.Admin().RegisterMetrics(reg))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := f.NewSession(ctx, coord.WithTTL(f.MinSessionTTL()))
		require.NoError(t, err)
		before := scrape(t, reg)
		c.Isolate(fi)
		select {
		case <-s.Done():
		case <-ctx.Done():
			t.Fatal("the cut-off session did not end")
		}
		require.ErrorIs(t, s.Err(), coord.ErrSessionExpired)
		after := scrape(t, reg)
		require.Equal(t, 1.0, after["coord_sessions_created_total"])
		require.Equal(t, 1.0, after["coord_sessions_jeopardy_total"])
		require.Equal(t, 1.0, after["coord_sessions_expired_total"])
		require.Greater(t, after["coord_transport_dropped_frames_total"], before["coord_transport_dropped_frames_total"])
	})
}

// A watch whose consumer stops reading ends as slow, and one from a
// revision the history no longer holds as compacted; both are counted.
func TestMetricsWatchEnds(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1, coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		cfg.HistoryRevisions = 100
	}))
	n := c.Leader()
	reg := prometheus.NewRegistry()
	require.NoError(t, n.Admin().RegisterMetrics(reg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow := n.Watch(ctx, "w/", coord.WithMaxLag(2))
	<-slow.Ready()
	for i := range 300 {
		_, err := n.Put(ctx, "w/k", []byte{byte(i)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return slow.Err() != nil }, 20*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, slow.Err(), coord.ErrSlowWatcher)

	old := n.Watch(ctx, "w/", coord.FromRev(1))
	for range old.Events() {
	}
	require.ErrorIs(t, old.Err(), coord.ErrCompacted)
	m := scrape(t, reg)
	require.Equal(t, 1.0, m["coord_watch_slow_ends_total"])
	require.Equal(t, 1.0, m["coord_watch_compacted_ends_total"])
	require.Zero(t, m["coord_watchers"])
}

// Sessions created by a member's clients count on that member, and an
// expiry decided by the cell counts once in the cell, on the member that
// decided it (the leader, for an orphaned session).
func TestMetricsClientSessionsAndCellExpiries(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithClients())
	regs := make([]*prometheus.Registry, c.Size())
	byName := map[string]int{}
	for i := range c.Size() {
		regs[i] = prometheus.NewRegistry()
		require.NoError(t, c.Node(i).Admin().RegisterMetrics(regs[i]))
		byName[c.Name(i)] = i
	}
	sum := func(name string) float64 {
		total := 0.0
		for _, reg := range regs {
			total += scrape(t, reg)[name]
		}
		return total
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := c.Connect(ctx)
	require.NoError(t, err)
	defer cl.Close()
	cs, err := cl.NewSession(ctx, coord.WithTTL(c.Leader().MinSessionTTL()))
	require.NoError(t, err)
	served, ok := byName[cl.Member()]
	require.True(t, ok, "the client talks to a member of the cell")
	require.Equal(t, 1.0, scrape(t, regs[served])["coord_sessions_created_total"], "the client's session counts where it was served")
	require.Equal(t, 1.0, sum("coord_sessions_created_total"), "and nowhere else")
	require.NoError(t, cs.Close(ctx))

	li := c.LeaderIndex()
	s, err := c.Node((li+1)%3).NewSession(ctx, coord.WithTTL(c.Leader().MinSessionTTL()))
	require.NoError(t, err)
	s.Orphan()
	require.Eventually(t, func() bool {
		return sum("coord_sessions_alive")/3 == 0 && sum("coord_session_expiries_decided_total") == 1
	},
		20*time.Second, 20*time.Millisecond, "the cell expired the orphaned session")
	require.Equal(t, 1.0, sum("coord_session_expiries_decided_total"), "counted once in the cell")
	require.Equal(t, 0.0, sum("coord_sessions_expired_total"), "an orphan is not its holder's expiry")
}
