package raftnode

import (
	"errors"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/errs"
)

// Event counters for metrics. The hot paths only add to atomics; the
// embedding layer reads them at scrape time (Node.Metrics), so a member
// nobody scrapes pays a few uncontended atomic adds per batch and no
// allocation.

// Metrics is a point-in-time copy of the member's event counters, each
// counted since Start.
type Metrics struct {
	// LeaderChanges counts the times this member saw a new leader (a
	// different one, or the same one in a new term); losing the leader
	// does not count, finding the next one does.
	LeaderChanges uint64
	// ProposalsCommitted counts Propose calls whose command applied.
	// ProposalsAmbiguous counts those that ended with ErrAmbiguous (the
	// command may or may not have applied), and ProposalsFailed every
	// other error: the command certainly did not apply.
	ProposalsCommitted uint64
	ProposalsFailed    uint64
	ProposalsAmbiguous uint64
	// ProposalsResent counts the commands handed to Raft again because
	// they may have been lost (a forward not seen to apply, a change of
	// term): each applies once all the same (resend.go).
	ProposalsResent uint64
	// SnapshotsSent counts snapshots streamed to followers to the end,
	// SnapshotsSendFailed those that failed on the way (Raft retries),
	// and SnapshotsInstalled the leader's snapshots that replaced this
	// member's state.
	SnapshotsSent       uint64
	SnapshotsSendFailed uint64
	SnapshotsInstalled  uint64
	// LogSync is the time each synced write of the Raft log took (the
	// appends of one group commit and their fsync); Apply the time each
	// batch of committed entries took to apply to the state machine.
	LogSync Histogram
	Apply   Histogram
	// InlineOverBudget counts the batches the raft goroutine began to
	// apply itself and handed to the apply loop instead, because their
	// transactions read more than it may (inlineMaxReads).
	InlineOverBudget uint64
}

// Histogram is a copy of a duration histogram: the bucket bounds are
// HistogramBounds, the same for every histogram.
type Histogram struct {
	// Counts[i] is the number of observations of at most
	// HistogramBounds()[i] (cumulative, as Prometheus reports them).
	Counts [histBuckets]uint64
	// Count is the number of observations, larger ones included, and
	// Sum their total.
	Count uint64
	Sum   time.Duration
}

// Bucket bounds: histBase doubled histBuckets-1 times, 100µs to about
// 1.6s, wide enough for an in-memory log and a failing disk alike.
const (
	histBase    = 100 * time.Microsecond
	histBuckets = 15
)

// HistogramBounds returns the upper bounds of Histogram's buckets.
func HistogramBounds() [histBuckets]time.Duration {
	var b [histBuckets]time.Duration
	for i := range b {
		b[i] = histBase << i
	}
	return b
}

// histogram is a lock-free duration histogram: one atomic add per
// bucket hit, the bucket found by a shift, not a search.
type histogram struct {
	buckets [histBuckets + 1]atomic.Uint64 // the last one is over the top bound
	sum     atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	h.buckets[bucketOf(d)].Add(1)
	h.sum.Add(int64(d))
}

// bucketOf returns the first bucket whose bound is at least d.
func bucketOf(d time.Duration) int {
	if d <= histBase {
		return 0
	}
	// For d in (base·2^(i-1), base·2^i], (d-1)/base has i significant bits.
	return min(bits.Len64(uint64(d-1)/uint64(histBase)), histBuckets)
}

// snapshot copies h. The copy is not atomic as a whole: a concurrent
// observation may be in the counts and not yet in the sum, which a
// scrape tolerates; Count is derived from the buckets so the counts
// stay consistent with each other.
func (h *histogram) snapshot() Histogram {
	var out Histogram
	var total uint64
	for i := range h.buckets {
		total += h.buckets[i].Load()
		if i < histBuckets {
			out.Counts[i] = total
		}
	}
	out.Count = total
	out.Sum = time.Duration(h.sum.Load())
	return out
}

// counters are the member's event counters.
type counters struct {
	leaderChanges       atomic.Uint64
	committed           atomic.Uint64
	failed              atomic.Uint64
	ambiguous           atomic.Uint64
	resent              atomic.Uint64
	snapshotsSent       atomic.Uint64
	snapshotsSendFailed atomic.Uint64
	snapshotsInstalled  atomic.Uint64
	logSync             histogram
	apply               histogram
	inlineSpent         atomic.Uint64
}

// countProposal counts the outcome of one Propose call.
func (c *counters) countProposal(err error) {
	switch {
	case err == nil:
		c.committed.Add(1)
	case errors.Is(err, errs.Ambiguous):
		c.ambiguous.Add(1)
	default:
		c.failed.Add(1)
	}
}

// Metrics returns the member's event counters.
func (n *Node) Metrics() Metrics {
	c := &n.counters
	return Metrics{
		LeaderChanges:       c.leaderChanges.Load(),
		ProposalsCommitted:  c.committed.Load(),
		ProposalsFailed:     c.failed.Load(),
		ProposalsAmbiguous:  c.ambiguous.Load(),
		ProposalsResent:     c.resent.Load(),
		SnapshotsSent:       c.snapshotsSent.Load(),
		SnapshotsSendFailed: c.snapshotsSendFailed.Load(),
		SnapshotsInstalled:  c.snapshotsInstalled.Load(),
		LogSync:             c.logSync.snapshot(),
		Apply:               c.apply.snapshot(),
		InlineOverBudget:    c.inlineSpent.Load(),
	}
}
