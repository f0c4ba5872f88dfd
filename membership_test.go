package coord_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
)

func memberNames(t *testing.T, n *coord.Node, ctx context.Context) map[string]bool {
	t.Helper()
	ms, err := n.Admin().Members(ctx)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, m := range ms {
		out[m.Name] = m.Learner
	}
	return out
}

func TestLearnerCatchesUpBySnapshotAndServes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(i int, cfg *coord.Config) {
			cfg.CompactEvery = 50
			cfg.CatchUpEntries = 10
		}))
		ctx := ctxT(t, 30*time.Second)
		leader := c.Leader()
		for i := range 200 {
			_, err := leader.Put(ctx, fmt.Sprintf("k/%03d", i), []byte(fmt.Sprint(i)))
			require.NoError(t, err)
		}
		require.NoError(t, leader.Admin().AddLearner(ctx, "learner", "learner"))
		require.ErrorIs(t, leader.Admin().AddLearner(ctx, "learner", "learner"), coord.ErrMemberExists)
		require.Equal(t, map[string]bool{"n0": false, "n1": false, "n2": false, "learner": true}, memberNames(t, leader, ctx))
		// Not started yet: it cannot have caught up.
		require.ErrorIs(t, c.Node(1).Admin().Promote(ctx, "learner"), coord.ErrNotCaughtUp)

		li := c.Join("learner")
		l := c.Node(li)
		require.Eventually(t, func() bool {
			kvs, _, err := l.List(ctx, "k/", coord.Serializable())
			return err == nil && len(kvs) == 200
		}, 20*time.Second, 10*time.Millisecond, "the learner catches up (by snapshot: the log was compacted)")
		got, err := l.Get(ctx, "k/199")
		require.NoError(t, err, "linearizable reads on a learner")
		require.Equal(t, "199", string(got.Value))
		w := l.Watch(ctx, "k/")
		kv, err := leader.Put(ctx, "k/new", []byte("x"))
		require.NoError(t, err)
		ev := nextEvent(t, w)
		require.Equal(t, kv.ModRev, ev.Rev, "watches on a learner")

		require.Eventually(t, func() bool { return c.Node(2).Admin().Promote(ctx, "learner") == nil }, 10*time.Second, 50*time.Millisecond)
		require.Equal(t, map[string]bool{"n0": false, "n1": false, "n2": false, "learner": false}, memberNames(t, l, ctx))
		require.ErrorIs(t, leader.Admin().Promote(ctx, "nobody"), coord.ErrUnknownMember)
	})
}

func TestReplaceAVoterWithoutDowntime(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	leaderIdx := c.LeaderIndex()
	old := (leaderIdx + 1) % 3 // a follower is replaced
	writer := c.Node((leaderIdx + 2) % 3)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	var failures []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("w/%05d", i)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := writer.Put(wctx, key, []byte(key))
			cancel()
			mu.Lock()
			if err != nil {
				failures = append(failures, err)
			} else {
				acked = append(acked, key)
			}
			mu.Unlock()
		}
	}()

	require.NoError(t, c.Leader().Admin().AddLearner(ctx, "n3", "n3"))
	c.Join("n3")
	require.Eventually(t, func() bool { return c.Leader().Admin().Promote(ctx, "n3") == nil }, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, c.Leader().Admin().RemoveMember(ctx, c.Name(old)))
	require.ErrorIs(t, c.Leader().Admin().AddLearner(ctx, c.Name(old), "x"), coord.ErrMemberExists, "a removed member's name is never reused")
	names := memberNames(t, writer, ctx)
	require.NotContains(t, names, c.Name(old))
	require.Contains(t, names, "n3")
	// Keep writing after the change too: the point is continuity.
	mu.Lock()
	after := len(acked)
	mu.Unlock()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= after+20 }, 10*time.Second, time.Millisecond)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, failures, "every write succeeded while the voter was replaced")
	require.NotEmpty(t, acked)
	n3 := c.Node(3)
	for _, key := range acked {
		kv, err := n3.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, key, string(kv.Value))
	}
}

// A member that comes back with an empty data directory may have lost
// its vote and entries it acknowledged (invariant 12): the others must
// not count it, and it must stop with a clear error rather than rejoin
// as if nothing happened (which used to panic Raft on the first
// heartbeat). The cell keeps working with the other two.
func TestWipedMemberIsRefusedAndStops(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := c.Leader().Put(ctx, "before", []byte("x"))
	require.NoError(t, err)
	victim := (c.LeaderIndex() + 1) % 3
	// The victim must have acknowledged the put before it loses its disk:
	// then the leader's heartbeats commit past its empty log and it knows
	// it lost state. (One wiped before acknowledging anything past the
	// bootstrap entries lost nothing it promised; it is ignored by the
	// members that know it, but only the leader, which it hears from,
	// tells it so, one of the two voters it needs to stop.)
	_, err = c.Node(victim).Get(ctx, "before")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Node(victim).Status().Revision >= kv.ModRev }, 10*time.Second, time.Millisecond)
	c.Crash(victim)
	c.Wipe(victim)
	c.Restart(victim)
	n := c.Node(victim)
	select {
	case <-n.Done():
	case <-ctx.Done():
		t.Fatal("a wiped member kept running")
	}
	require.ErrorIs(t, n.Err(), coord.ErrStateLost)
	// The two others are a quorum of three and carry on.
	for i := range 3 {
		if i == victim {
			continue
		}
		_, err := c.Node(i).Put(ctx, "after", []byte("y"))
		require.NoError(t, err)
	}
}

func TestDataDirBelongsToOneMember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	disk := storage.NewMemDisk()
	net := transport.NewNetwork(1)
	defer net.Close()
	n, err := coord.Open(ctx, coord.Config{Name: "a", Transport: net.Join("a"), Disk: disk})
	require.NoError(t, err)
	require.NoError(t, n.Close())
	_, err = coord.Open(ctx, coord.Config{Name: "b", Transport: net.Join("b"), Disk: disk})
	require.ErrorIs(t, err, coord.ErrInvalidConfig)
	require.ErrorContains(t, err, `belongs to member "a"`)
}

// A follower's Promote is carried out by the leader, over the admin RPC,
// and comes back with the leader's verdict as the same sentinels.
func TestFollowerPromoteAsksTheLeader(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	li := c.LeaderIndex()
	follower := c.Node((li + 1) % 3)
	require.NoError(t, c.Node(li).Admin().AddLearner(ctx, "learner", "learner"))

	err := follower.Admin().Promote(ctx, "learner")
	require.ErrorIs(t, err, coord.ErrNotCaughtUp, "not started: it cannot have caught up")
	if c.LeaderIndex() == li {
		require.ErrorContains(t, err, "from the leader")
	}
	require.ErrorIs(t, follower.Admin().Promote(ctx, "nobody"), coord.ErrUnknownMember)

	c.Join("learner")
	require.Eventually(t, func() bool { return follower.Admin().Promote(ctx, "learner") == nil }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, map[string]bool{"n0": false, "n1": false, "n2": false, "learner": false}, memberNames(t, follower, ctx))
	require.NoError(t, follower.Admin().Promote(ctx, "learner"), "promoting a voter changes nothing")
}

// A wiped member that hears only from a leader elected after it lost its
// disk (whose heartbeats commit nothing on it, as that leader never heard
// it acknowledge anything) is refused by that leader alone; it asks every
// voter to check its incarnation, and stops once a majority refuse it.
// The victim is the first leader, so every member knows its incarnation.
func TestWipedMemberStopsAfterLeaderChange(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	victim := c.LeaderIndex()
	_, err := c.Node(victim).Put(ctx, "before", []byte("x"))
	require.NoError(t, err)
	c.Crash(victim)
	c.Wipe(victim)
	watcher := c.Node((victim + 1) % 5)
	require.Eventually(t, func() bool {
		l := watcher.Status().Leader
		return l != "" && l != c.Name(victim)
	}, 20*time.Second, time.Millisecond, "a new leader among the four others")
	c.Restart(victim)
	n := c.Node(victim)
	select {
	case <-n.Done():
	case <-ctx.Done():
		t.Fatal("a wiped member kept running")
	}
	require.ErrorIs(t, n.Err(), coord.ErrStateLost)
	_, err = watcher.Put(ctx, "after", []byte("y"))
	require.NoError(t, err)
}
