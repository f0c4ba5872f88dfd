package member

import (
	"context"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/lockq"
	"github.com/coordcell/coord/raftnode"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics registers the member's metrics, named coord_*, with
// reg. They are read from the member's state when reg is scraped, so
// they cost nothing between scrapes and add no work on the write path.
// Event counters and histograms are atomics kept by the packages that
// see the events, read here at scrape time too. No label is per key,
// session or lock: the only labels are bounded sets (member roles and
// health, and peer: the names of the cell's members). A process that embeds several members
// registers each through prometheus.WrapRegistererWith with a member
// label.
//
// Serve them with Handler(WithMetricsGatherer(registry)).
func (n *Node) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(newCollector(n))
}

// openMetrics registers the metrics with Config.Metrics, if set. Open
// calls it once the member runs; Close calls closeMetrics, so that a
// member reopened in the same process (a restart) can register again.
func (n *Node) openMetrics() error {
	if n.cfg.Metrics == nil {
		return nil
	}
	if err := n.RegisterMetrics(n.cfg.Metrics); err != nil {
		return fmt.Errorf("%w: Metrics: %w", errs.InvalidConfig, err)
	}
	return nil
}

// closeMetrics unregisters what openMetrics registered. A registry knows
// a collector by its descriptors, so a fresh collector of this member
// stands for the one registered.
func (n *Node) closeMetrics() {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Unregister(newCollector(n))
	}
}

// collector reads a Node's metrics at scrape time.
type collector struct {
	n *Node

	term, isLeader, hasLeader            *prometheus.Desc
	commit, applied, lastIndex, applyLag *prometheus.Desc
	logSyncs, logEntries, dropped        *prometheus.Desc
	revision, oldestRev, sessions        *prometheus.Desc
	lockQueues, lockWaiters, elections   *prometheus.Desc
	members, memberHealth, up            *prometheus.Desc
	quota, keyspace                      *prometheus.Desc
	logHeld, segmentCuts, inlineCuts     *prometheus.Desc
	events                               eventDescs
}

func newCollector(n *Node) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("coord_"+name, help, labels, nil)
	}
	return &collector{
		n:           n,
		up:          d("up", "1 while the member runs, 0 once it has stopped (closed or failed)."),
		term:        d("raft_term", "The member's current Raft term; each increase is an election."),
		isLeader:    d("raft_is_leader", "1 when this member is the leader."),
		hasLeader:   d("raft_has_leader", "1 when this member knows a leader."),
		commit:      d("raft_commit_index", "The highest log index this member knows committed."),
		applied:     d("raft_applied_index", "The highest log index applied to this member's state."),
		lastIndex:   d("raft_last_index", "The last index of this member's Raft log."),
		applyLag:    d("raft_apply_lag_entries", "Committed entries not yet applied here (commit minus applied)."),
		logSyncs:    d("raft_log_syncs_total", "Fsyncs of the Raft log since the member opened."),
		logEntries:  d("raft_log_synced_entries_total", "Entries made durable by those fsyncs (entries/syncs is the group-commit factor)."),
		dropped:     d("raft_dropped_messages_total", "Messages from peers refused before Raft saw them (malformed, wrong sender, impossible)."),
		revision:    d("revision", "The cell revision of this member's applied state."),
		oldestRev:   d("history_oldest_revision", "The oldest revision a watch can still resume from; older ones get errs.Compacted."),
		sessions:    d("sessions_alive", "Live sessions in the cell."),
		lockQueues:  d("locks", "Locks with at least one holder or waiter."),
		lockWaiters: d("lock_waiters", "Entries queued after the first under each lock, summed over locks: waiters (and, for shared locks, co-holders)."),
		elections:   d("elections", "Election groups with at least one candidate."),
		quota:       d("quota_bytes", "The keyspace quota (Config.QuotaBytes): writes that would grow the keyspace past it fail."),
		keyspace:    d("keyspace_bytes", "Bytes of live keys and values, as the quota counts them (alert well before quota_bytes)."),
		members:     d("members", "Members of the cell by role.", "role"),
		memberHealth: d("member_health", "Members by health as the leader sees them (only the leader reports it).",
			"health"),
		logHeld: d("raft_log_entries", "Entries in this member's Raft log (compaction keeps it bounded)."),
		segmentCuts: d("raft_log_segments_started_total",
			"Segments of the Raft log started since the member opened (one each 32 MiB of log)."),
		inlineCuts: d("raft_log_segments_filled_inline_total",
			"Segments started with no segment prepared ahead, whose zeros were written and synced on the append path, holding the member's commits; it stays 0 while the preparation keeps up."),
		events: newEventDescs(d),
	}
}

// Describe sends every descriptor the collector may emit.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.term, c.isLeader, c.hasLeader, c.commit, c.applied,
		c.lastIndex, c.applyLag, c.logSyncs, c.logEntries, c.dropped, c.revision, c.oldestRev,
		c.sessions, c.lockQueues, c.lockWaiters, c.elections, c.members, c.memberHealth, c.quota, c.keyspace, c.logHeld, c.segmentCuts, c.inlineCuts} {
		ch <- d
	}
	c.events.describe(ch)
}

// scrapeWait bounds the one scrape-time call that waits on the Raft loop
// (the leader's view of member health): a scrape must not hang.
const scrapeWait = 500 * time.Millisecond

// Collect reads the member's state and sends its metrics.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	select {
	case <-n.Done():
		gauge(c.up, 0)
		return
	default:
		gauge(c.up, 1)
	}
	st := n.Status()
	rs := n.raft.Status()
	gauge(c.term, float64(st.Term))
	gauge(c.isLeader, boolFloat(st.Role == raftnode.RoleLeader))
	gauge(c.hasLeader, boolFloat(st.Leader != ""))
	gauge(c.commit, float64(st.Commit))
	gauge(c.applied, float64(st.Applied))
	gauge(c.lastIndex, float64(st.LastIndex))
	gauge(c.applyLag, float64(st.Commit-min(st.Applied, st.Commit)))
	counter(c.logSyncs, float64(st.LogSyncs))
	counter(c.logEntries, float64(st.LogEntries))
	counter(c.dropped, float64(rs.Dropped))
	gauge(c.revision, float64(st.Revision))
	gauge(c.oldestRev, float64(n.sm.OldestRevision()))
	gauge(c.quota, float64(n.cfg.QuotaBytes))
	gauge(c.keyspace, float64(n.sm.KeyspaceBytes()))
	first, _ := n.store.RaftLog().FirstIndex()
	gauge(c.logHeld, float64(st.LastIndex+1-min(first, st.LastIndex+1)))
	cuts, inline := n.store.RaftLog().SegmentCuts()
	counter(c.segmentCuts, float64(cuts))
	counter(c.inlineCuts, float64(inline))
	c.events.collect(ch, n)

	// Only the recipes' key space is read, from this member's memory
	// and with no read barrier: a scrape must stay cheap with a large
	// keyspace and work on a member without a leader.
	var all []command.KV
	for _, p := range []string{lockq.LockSpace, lockq.ElectionSpace} {
		kvs, _, err := n.sm.List(p)
		if err != nil {
			break
		}
		for _, kv := range kvs {
			all = append(all, kv)
		}
	}
	locks, elections := queuesOf(all)
	waiters := 0
	for _, l := range locks {
		waiters += len(l.Queue) - 1
	}
	gauge(c.lockQueues, float64(len(locks)))
	gauge(c.lockWaiters, float64(waiters))
	gauge(c.elections, float64(len(elections)))
	gauge(c.sessions, float64(n.sm.SessionCount()))

	ctx, cancel := context.WithTimeout(context.Background(), scrapeWait)
	defer cancel()
	roles := map[string]int{"voter": 0, "learner": 0}
	health := map[string]int{}
	for _, m := range n.memberHealth(ctx, st) {
		roles[m.Role]++
		health[m.Health]++
	}
	for role, k := range roles {
		gauge(c.members, float64(k), role)
	}
	if st.Role == raftnode.RoleLeader {
		for _, h := range []string{healthHealthy, healthUnreachable} {
			gauge(c.memberHealth, float64(health[h]), h)
		}
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
