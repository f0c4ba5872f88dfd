package coord

import (
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/raftnode"
	"github.com/coordcell/coord/transport"
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics that count events. Raft, the transport and the watch hub
// count in atomics of their own (raftnode.Node.Metrics,
// transport.StatsReporter, watch.Hub.Stats) and sessions in
// spi.SessionStats; the collector reads them at scrape time, so the paths
// that count pay an atomic add and allocate nothing.

// countProposed counts what a command this member proposed did to
// sessions, once it applied: a client's session created (a member's own
// is counted by NewSession), or a session ended by an expiry this member
// decided. Every member applies every expiry, but only the proposer can
// tell an expiry from a close (the applied output does not say), and only
// the first end of a session applies (res.SessionID names it; a later one
// is a no-op), so each expiry is counted once in the cell.
func countProposed(c *spi.SessionStats, cmd *command.Command, res command.Result, err error) {
	if err == nil && cmd.Kind == command.KindSessionCreate {
		switch res.Status {
		case command.StatusTooManySessions:
			c.RefusedLimit.Add(1)
		case command.StatusQuotaExceeded:
			c.RefusedQuota.Add(1)
		}
	}
	if err != nil || res.Status != command.StatusOK || cmd.Session == nil {
		return
	}
	switch {
	case cmd.Kind == command.KindSessionCreate && cmd.Session.Owner != "":
		c.Created.Add(1)
	case cmd.Kind == command.KindSessionEnd && cmd.Session.Expired && res.SessionID == cmd.Session.ID:
		c.Decided.Add(1)
	}
}

// eventDescs describes the event metrics.
type eventDescs struct {
	leaderChanges, committed, failed, ambiguous      *prometheus.Desc
	snapSent, snapFailed, snapInstalled              *prometheus.Desc
	logSync, apply                                   *prometheus.Desc
	bytesOut, bytesIn, framesOut, framesIn           *prometheus.Desc
	connErrors, droppedFrames                        *prometheus.Desc
	sessCreated, sessExpired, sessJeopardy           *prometheus.Desc
	sessDecided, sessRefused                         *prometheus.Desc
	watchers, watchEvents, watchSlow, watchCompacted *prometheus.Desc
	clientCertsRefused                               *prometheus.Desc
}

func newEventDescs(d func(name, help string, labels ...string) *prometheus.Desc) eventDescs {
	return eventDescs{
		leaderChanges: d("raft_leader_changes_total", "Times this member saw a new leader (or the same one in a new term)."),
		committed:     d("raft_proposals_committed_total", "Commands proposed through this member that applied."),
		failed:        d("raft_proposals_failed_total", "Commands proposed through this member that certainly did not apply (no quorum, closed, cancelled before reaching Raft)."),
		ambiguous:     d("raft_proposals_ambiguous_total", "Commands proposed through this member whose outcome is unknown (ErrAmbiguous)."),
		snapSent:      d("raft_snapshots_sent_total", "Snapshots this member streamed to followers to the end."),
		snapFailed:    d("raft_snapshot_send_failures_total", "Snapshot transfers to followers that failed on the way (Raft retries them)."),
		snapInstalled: d("raft_snapshots_installed_total", "Snapshots from the leader that replaced this member's state."),
		logSync: d("raft_log_sync_duration_seconds",
			"Time to write and fsync one group commit of the Raft log."),
		apply:         d("raft_apply_duration_seconds", "Time to apply one batch of committed entries to the state machine."),
		bytesOut:      d("transport_sent_bytes_total", "Bytes of frames sent to each peer.", "peer"),
		bytesIn:       d("transport_received_bytes_total", "Bytes of frames received from each peer.", "peer"),
		framesOut:     d("transport_sent_frames_total", "Frames sent to each peer.", "peer"),
		framesIn:      d("transport_received_frames_total", "Frames received from each peer.", "peer"),
		connErrors:    d("transport_connection_errors_total", "Failed dials, lost connections and inbound connections refused or closed for cause."),
		droppedFrames: d("transport_dropped_frames_total", "Envelopes the transport dropped instead of sending (full queue, unknown or unreachable peer, too large)."),
		sessCreated:   d("sessions_created_total", "Sessions created through this member: by its NewSession and by the clients it serves."),
		sessExpired:   d("sessions_expired_total", "This member's sessions that expired (the cell ended them, or their deadline passed here) rather than being closed."),
		sessDecided: d("session_expiries_decided_total",
			"Sessions the cell expired by this member's decision: as leader (the deadline passed in its table) or as the holder's member (the deadline passed here). Each expiry is counted once, on the member that decided it: sum over members for the cell's count."),
		sessJeopardy: d("sessions_jeopardy_total", "Times one of this member's sessions entered jeopardy (keep-alives unconfirmed for half its TTL)."),
		sessRefused: d("sessions_refused_total",
			"Session creations through this member refused, by reason: ttl (outside MinSessionTTL..MaxSessionTTL), client_limit (the client identity holds ClientMaxSessions), quota (QuotaBytes).", "reason"),
		watchers:    d("watchers", "Watches this member serves now (its own and its clients')."),
		watchEvents: d("watch_events_sent_total", "Events handed to this member's watches."),
		watchSlow:   d("watch_slow_ends_total", "Watches ended because their consumer fell too far behind (ErrSlowWatcher)."),
		watchCompacted: d("watch_compacted_ends_total",
			"Watches ended because they needed revisions older than the retained history (ErrCompacted)."),
		clientCertsRefused: d("client_certs_refused_total",
			"Client certificates this member's client port refused: a credential not its name's (forged, of another cell) or revoked, or a certificate of no CA the port trusts (under TLS alone crypto/tls refuses those before the member sees them)."),
	}
}

func (e *eventDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{e.leaderChanges, e.committed, e.failed, e.ambiguous,
		e.snapSent, e.snapFailed, e.snapInstalled, e.logSync, e.apply,
		e.bytesOut, e.bytesIn, e.framesOut, e.framesIn, e.connErrors, e.droppedFrames,
		e.sessCreated, e.sessExpired, e.sessJeopardy, e.sessDecided, e.sessRefused,
		e.watchers, e.watchEvents, e.watchSlow, e.watchCompacted, e.clientCertsRefused} {
		ch <- d
	}
}

func (e *eventDescs) collect(ch chan<- prometheus.Metric, n *Node) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	rm := n.raft.Metrics()
	counter(e.leaderChanges, rm.LeaderChanges)
	counter(e.committed, rm.ProposalsCommitted)
	counter(e.failed, rm.ProposalsFailed)
	counter(e.ambiguous, rm.ProposalsAmbiguous)
	counter(e.snapSent, rm.SnapshotsSent)
	counter(e.snapFailed, rm.SnapshotsSendFailed)
	counter(e.snapInstalled, rm.SnapshotsInstalled)
	ch <- constHistogram(e.logSync, rm.LogSync)
	ch <- constHistogram(e.apply, rm.Apply)

	// A transport the user brought may not count; then there is nothing
	// to report rather than zeros that look like a dead link.
	if sr, ok := n.tr.(transport.StatsReporter); ok {
		ts := sr.Stats()
		for _, p := range ts.Peers {
			counter(e.bytesOut, p.BytesOut, p.Peer)
			counter(e.bytesIn, p.BytesIn, p.Peer)
			counter(e.framesOut, p.FramesOut, p.Peer)
			counter(e.framesIn, p.FramesIn, p.Peer)
		}
		counter(e.connErrors, ts.ConnErrors)
		counter(e.droppedFrames, ts.Dropped)
	}

	ss := &n.sessionStats
	counter(e.sessCreated, ss.Created.Load())
	counter(e.sessExpired, ss.Expired.Load())
	counter(e.sessJeopardy, ss.Jeopardy.Load())
	counter(e.sessDecided, ss.Decided.Load())
	counter(e.sessRefused, ss.RefusedTTL.Load(), "ttl")
	counter(e.sessRefused, ss.RefusedLimit.Load(), "client_limit")
	counter(e.sessRefused, ss.RefusedQuota.Load(), "quota")

	hs := n.hub.Stats()
	ch <- prometheus.MustNewConstMetric(e.watchers, prometheus.GaugeValue, float64(hs.Watchers))
	counter(e.watchEvents, hs.Events)
	counter(e.watchSlow, hs.SlowEnds)
	counter(e.watchCompacted, hs.CompactedEnds)
	counter(e.clientCertsRefused, n.clients.auth.refused.Load())
}

// constHistogram turns raftnode's duration histogram into Prometheus's.
func constHistogram(d *prometheus.Desc, h raftnode.Histogram) prometheus.Metric {
	bounds := raftnode.HistogramBounds()
	buckets := make(map[float64]uint64, len(bounds))
	for i, b := range bounds {
		buckets[b.Seconds()] = h.Counts[i]
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets)
}
