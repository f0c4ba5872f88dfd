package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	bounds := HistogramBounds()
	require.Equal(t, 100*time.Microsecond, bounds[0])
	for i, b := range bounds {
		// Each bound belongs to its own bucket, and a nanosecond more to
		// the next one.
		require.Equal(t, i, bucketOf(b), "bound %v", b)
		require.Equal(t, i+1, bucketOf(b+1), "just over %v", b)
	}
	require.Equal(t, 0, bucketOf(0))
	require.Equal(t, 0, bucketOf(-time.Second), "a clock that went back counts as fast")
	require.Equal(t, histBuckets, bucketOf(time.Hour))

	var h histogram
	for _, d := range []time.Duration{50 * time.Microsecond, 150 * time.Microsecond, 150 * time.Microsecond, time.Hour} {
		h.observe(d)
	}
	s := h.snapshot()
	require.Equal(t, uint64(4), s.Count)
	require.Equal(t, uint64(1), s.Counts[0])
	require.Equal(t, uint64(3), s.Counts[1], "cumulative")
	require.Equal(t, uint64(3), s.Counts[histBuckets-1], "the hour is over every bound")
	require.Equal(t, 350*time.Microsecond+time.Hour, s.Sum)
}

// The counters move with their events on a real cell: elections,
// committed, failed and ambiguous proposals, log syncs, applies, and a
// snapshot sent by the leader and installed by a follower that fell
// behind the compacted log.
func TestMetricsCountEvents(t *testing.T) {
	t.Parallel()
	c := newTestCell(t, 3, func(cfg *Config) { cfg.CompactEvery, cfg.CatchUpEntries = 20, 5 })
	lead := c.leader()
	for i, n := range c.nodes {
		require.GreaterOrEqual(t, n.Metrics().LeaderChanges, uint64(1), "member %d saw the first leader", i)
	}
	cut := (lead + 1) % 3
	for i := range c.nodes {
		if i != cut {
			c.net.Block(c.names[i], c.names[cut]) // it can still forward to the leader
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A command forwarded by the cut member applies on the others only;
	// the cut member learns of it inside a snapshot, so its caller gets
	// ErrAmbiguous.
	res := make(chan error, 1)
	go func() {
		_, err := c.nodes[cut].Propose(ctx, putCmd("from-cut", "x"))
		res <- err
	}()
	waitFor(t, "the forwarded command to apply on the leader", func() bool { return len(c.data(lead)) == 1 })
	for i := range 60 {
		c.put(lead, fmt.Sprint("k", i), "v")
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	_, err := c.nodes[lead].Propose(done, putCmd("never", "x"))
	require.ErrorIs(t, err, context.Canceled)

	lm := c.nodes[lead].Metrics()
	require.GreaterOrEqual(t, lm.ProposalsCommitted, uint64(60))
	require.Equal(t, uint64(1), lm.ProposalsFailed)
	require.Zero(t, lm.ProposalsAmbiguous)
	require.NotZero(t, lm.LogSync.Count)
	require.NotZero(t, lm.Apply.Count)
	require.GreaterOrEqual(t, lm.Apply.Count, lm.Apply.Counts[histBuckets-1])
	require.Positive(t, lm.Apply.Sum)

	waitFor(t, "the leader to compact past the cut member", func() bool {
		first, _ := c.stores[lead].RaftLog().FirstIndex()
		return first > c.nodes[cut].Status().LastIndex+1
	})
	for i := range c.nodes {
		if i != cut {
			c.net.Unblock(c.names[i], c.names[cut])
		}
	}
	require.NoError(t, <-res, "the command's result comes with the snapshot")
	c.converged()
	cm := c.nodes[cut].Metrics()
	require.Zero(t, cm.ProposalsAmbiguous)
	require.Equal(t, uint64(1), cm.ProposalsCommitted)
	require.GreaterOrEqual(t, cm.SnapshotsInstalled, uint64(1))
	waitFor(t, "the leader to count its snapshot sent", func() bool {
		return c.nodes[lead].Metrics().SnapshotsSent >= 1
	})
}

// BenchmarkHistogramObserve is the cost the log sync and apply paths pay
// per batch for their histograms: it must stay a few nanoseconds and no
// allocation.
func BenchmarkHistogramObserve(b *testing.B) {
	var h histogram
	b.ReportAllocs()
	d := time.Duration(0)
	for b.Loop() {
		h.observe(d)
		d = (d + 7919*time.Microsecond) % time.Second
	}
}
