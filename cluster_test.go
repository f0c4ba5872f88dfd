package coord_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestPutGetAcrossMembers(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	leader := c.LeaderIndex()
	follower := c.Node((leader + 1) % 3)

	kv, err := follower.Put(ctx, "a", []byte("1"))
	require.NoError(t, err)
	require.Equal(t, int64(1), kv.Version)
	require.Equal(t, kv.CreateRev, kv.ModRev)

	for i := range 3 {
		got, err := c.Node(i).Get(ctx, "a")
		require.NoError(t, err, "member %d", i)
		require.Equal(t, []byte("1"), got.Value)
		require.Equal(t, kv.ModRev, got.ModRev)
	}

	kv2, err := c.Node(leader).Put(ctx, "a", []byte("2"))
	require.NoError(t, err)
	require.Equal(t, int64(2), kv2.Version)
	require.Equal(t, kv.CreateRev, kv2.CreateRev)
	require.Equal(t, kv.ModRev+1, kv2.ModRev, "one revision per change")

	_, err = follower.Get(ctx, "missing")
	require.ErrorIs(t, err, coord.ErrNotFound)
}

func TestCompareAndSet(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(0)

	_, err := n.Put(ctx, "cfg", []byte("v1"), coord.IfVersion(0))
	require.NoError(t, err, "create-only on an absent key")
	_, err = n.Put(ctx, "cfg", []byte("again"), coord.IfVersion(0))
	require.ErrorIs(t, err, coord.ErrConflict, "create-only on an existing key")
	_, err = n.Put(ctx, "cfg", []byte("v2"), coord.IfVersion(5))
	require.ErrorIs(t, err, coord.ErrConflict)
	kv, err := n.Put(ctx, "cfg", []byte("v2"), coord.IfVersion(1))
	require.NoError(t, err)
	require.Equal(t, int64(2), kv.Version)

	got, err := c.Node(1).Get(ctx, "cfg")
	require.NoError(t, err)
	require.Equal(t, []byte("v2"), got.Value, "a failed CAS changed nothing")

	_, err = n.Delete(ctx, "cfg", coord.IfVersion(1))
	require.ErrorIs(t, err, coord.ErrConflict)
	rev, err := n.Delete(ctx, "cfg", coord.IfVersion(2))
	require.NoError(t, err)
	require.Greater(t, rev, kv.ModRev)
	_, err = n.Get(ctx, "cfg")
	require.ErrorIs(t, err, coord.ErrNotFound)
}

func TestTxnAndList(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(1)
	_, err := n.Put(ctx, "app/x", []byte("1"))
	require.NoError(t, err)

	res, err := n.Txn(ctx).
		If(coord.Value("app/x").Eq([]byte("1")), coord.Version("app/y").Eq(0)).
		Then(coord.OpPut("app/y", []byte("2")), coord.OpPut("app/z", []byte("3")), coord.OpGet("app/x")).
		Else(coord.OpGet("app/y")).
		Commit()
	require.NoError(t, err)
	require.True(t, res.Succeeded)
	require.Len(t, res.Results, 3)
	require.Equal(t, []byte("1"), res.Results[2].KVs[0].Value)
	require.Equal(t, res.Rev, res.Results[0].KVs[0].ModRev)
	require.Equal(t, res.Rev, res.Results[1].KVs[0].ModRev, "a txn's writes share one revision")

	res, err = n.Txn(ctx).If(coord.Version("app/y").Eq(0)).Then(coord.OpDelete("app/x")).Else(coord.OpGet("app/y")).Commit()
	require.NoError(t, err)
	require.False(t, res.Succeeded)
	require.Equal(t, []byte("2"), res.Results[0].KVs[0].Value)

	kvs, rev, err := c.Node(2).List(ctx, "app/")
	require.NoError(t, err)
	require.Equal(t, res.Rev, rev)
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, kv.Key)
	}
	require.Equal(t, []string{"app/x", "app/y", "app/z"}, keys)

	res, err = n.Txn(ctx).Then(coord.OpDeletePrefix("app/")).Commit()
	require.NoError(t, err)
	require.Equal(t, int64(3), res.Results[0].Deleted)
}

func TestLeaderCrashElectsNewLeader(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	old := c.LeaderIndex()
	_, err := c.Node(old).Put(ctx, "before", []byte("x"))
	require.NoError(t, err)

	c.Crash(old)
	next := c.LeaderIndex()
	require.NotEqual(t, old, next)
	_, err = c.Node(next).Put(ctx, "after", []byte("y"))
	require.NoError(t, err)
	got, err := c.Node(next).Get(ctx, "before")
	require.NoError(t, err)
	require.Equal(t, []byte("x"), got.Value)

	c.Restart(old)
	require.Eventually(t, func() bool {
		kv, err := c.Node(old).Get(ctx, "after", coord.Serializable())
		return err == nil && string(kv.Value) == "y"
	}, 10*time.Second, 10*time.Millisecond, "restarted member catches up")
}

func TestMinorityRefusesMajorityContinues(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 5)
		ctx := ctxT(t, 30*time.Second)
		leader := c.LeaderIndex()
		_, err := c.Node(leader).Put(ctx, "k", []byte("before"))
		require.NoError(t, err)
		// Put the old leader in the minority, so the test covers a leader
		// that must notice it lost its quorum.
		minority := []int{leader, (leader + 1) % 5}
		var majority []int
		for i := range 5 {
			if i != minority[0] && i != minority[1] {
				majority = append(majority, i)
			}
		}
		c.Partition(minority, majority)

		for _, i := range minority {
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := c.Node(i).Put(wctx, "k", []byte("minority"))
			cancel()
			require.Error(t, err)
			require.True(t, errors.Is(err, coord.ErrNoQuorum) || errors.Is(err, coord.ErrAmbiguous), "got %v", err)
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = c.Node(i).Get(rctx, "k")
			cancel()
			require.ErrorIs(t, err, coord.ErrNoQuorum, "a linearizable read on the minority must fail, not answer stale")
			kv, err := c.Node(i).Get(ctx, "k", coord.Serializable())
			require.NoError(t, err, "serializable reads still answer locally")
			require.Equal(t, "before", string(kv.Value))
		}

		// The majority elects a leader among itself and goes on.
		var kv coord.KV
		require.Eventually(t, func() bool {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			kv, err = c.Node(majority[0]).Put(wctx, "k", []byte("majority"))
			return err == nil
		}, 15*time.Second, 10*time.Millisecond)

		c.Heal()
		for _, i := range minority {
			require.Eventually(t, func() bool {
				got, err := c.Node(i).Get(ctx, "k", coord.Serializable())
				return err == nil && string(got.Value) == "majority" && got.ModRev == kv.ModRev
			}, 15*time.Second, 10*time.Millisecond, "member %d catches up after heal", i)
		}
		got, err := c.Node(minority[0]).Get(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, "majority", string(got.Value), "the minority's refused write never appears")
	})
}

func TestLaggingFollowerCatchesUpBySnapshot(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(i int, cfg *coord.Config) {
		cfg.CompactEvery = 50
		cfg.CatchUpEntries = 10
	}))
	ctx := ctxT(t, 30*time.Second)
	leader := c.LeaderIndex()
	lagger := (leader + 1) % 3
	c.Isolate(lagger)
	for i := range 300 {
		_, err := c.Node(leader).Put(ctx, fmt.Sprintf("key/%03d", i), []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	require.Greater(t, c.Node(leader).Status().Applied, c.Node(lagger).Status().Applied+100)
	c.Heal()
	require.Eventually(t, func() bool {
		kvs, _, err := c.Node(lagger).List(ctx, "key/", coord.Serializable())
		return err == nil && len(kvs) == 300
	}, 20*time.Second, 10*time.Millisecond)
	kv, err := c.Node(lagger).Get(ctx, "key/299")
	require.NoError(t, err)
	require.Equal(t, "299", string(kv.Value))
	// The lagger keeps applying new writes after the snapshot.
	_, err = c.Node(leader).Put(ctx, "key/300", []byte("300"))
	require.NoError(t, err)
	_, err = c.Node(lagger).Get(ctx, "key/300")
	require.NoError(t, err)
}

func TestCrashAndRestartEveryMemberKeepsAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 30*time.Second)
		acked := map[string]string{}
		for i := range 100 {
			key, val := fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i)
			_, err := c.Node(i%3).Put(ctx, key, []byte(val))
			require.NoError(t, err)
			acked[key] = val
		}
		for i := range 3 {
			c.Crash(i)
		}
		for i := range 3 {
			c.Restart(i)
		}
		c.Leader()
		for i := range 3 {
			kvs, _, err := c.Node(i).List(ctx, "k")
			require.NoError(t, err)
			require.Len(t, kvs, len(acked), "member %d", i)
			for _, kv := range kvs {
				require.Equal(t, acked[kv.Key], string(kv.Value))
			}
		}
	})
}

func TestWatchFromRevision(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(0)
	first, err := n.Put(ctx, "w/a", []byte("1"))
	require.NoError(t, err)
	_, err = n.Put(ctx, "other", []byte("x"))
	require.NoError(t, err)
	_, err = n.Put(ctx, "w/b", []byte("2"))
	require.NoError(t, err)
	_, err = n.Delete(ctx, "w/a")
	require.NoError(t, err)

	w := c.Node(2).Watch(ctx, "w/", coord.FromRev(first.ModRev-1))
	var got []string
	for len(got) < 3 {
		ev := <-w.Events()
		got = append(got, fmt.Sprintf("%s %s@%d", ev.Type, ev.KV.Key, ev.Rev))
	}
	require.Equal(t, []string{
		fmt.Sprintf("PUT w/a@%d", first.ModRev),
		fmt.Sprintf("PUT w/b@%d", first.ModRev+2),
		fmt.Sprintf("DELETE w/a@%d", first.ModRev+3),
	}, got)

	// Live events follow the history without a gap.
	kv, err := n.Put(ctx, "w/c", []byte("3"))
	require.NoError(t, err)
	ev := <-w.Events()
	require.Equal(t, "w/c", ev.KV.Key)
	require.Equal(t, kv.ModRev, ev.Rev)
	w.Close()
	for range w.Events() {
	}
	require.ErrorIs(t, w.Err(), context.Canceled)
}

func TestWatchBelowRetainedHistoryIsCompacted(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1, coordtest.WithConfig(func(i int, cfg *coord.Config) {
		cfg.HistoryRevisions = 10
	}))
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(0)
	for i := range 30 {
		_, err := n.Put(ctx, "k", []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	w := n.Watch(ctx, "k", coord.FromRev(1))
	for range w.Events() {
		t.Fatal("no event expected below the retained history")
	}
	require.ErrorIs(t, w.Err(), coord.ErrCompacted)
	var ce *coord.CompactedError
	require.True(t, errors.As(w.Err(), &ce), "got %T", w.Err())
	require.Greater(t, ce.Oldest, int64(1), "the oldest revision still available")
}
