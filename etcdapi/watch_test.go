package etcdapi

import (
	"fmt"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// next is the next watch response, failing the test after a generous
// wait.
func next(t *testing.T, wc clientv3.WatchChan) clientv3.WatchResponse {
	t.Helper()
	select {
	case r, ok := <-wc:
		require.True(t, ok, "watch channel closed")
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no watch response in 20s")
	}
	return clientv3.WatchResponse{}
}

// TestWatch watches from a revision with prev_kv, an exact key, a range,
// filters and progress requests, through clientv3.
func TestWatch(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t, f.eps[1])
	ctx := tctx(t)

	p1, err := cli.Put(ctx, "w/a", "1")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "w/a", "2")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "w/ab", "x")
	require.NoError(t, err)
	d, err := cli.Delete(ctx, "w/a")
	require.NoError(t, err)

	// From the first put's revision, inclusive, with prev_kv: every change.
	wc := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(p1.Header.Revision), clientv3.WithPrevKV())
	var evs []*clientv3.Event
	for len(evs) < 4 {
		r := next(t, wc)
		require.NoError(t, r.Err())
		evs = append(evs, r.Events...)
	}
	require.Len(t, evs, 4)
	assert.Equal(t, mvccpb.PUT, evs[0].Type)
	assert.Nil(t, evs[0].PrevKv)
	assert.Equal(t, p1.Header.Revision, evs[0].Kv.ModRevision)
	assert.Equal(t, "1", string(evs[1].PrevKv.Value))
	assert.Equal(t, "w/ab", string(evs[2].Kv.Key))
	assert.Equal(t, mvccpb.DELETE, evs[3].Type)
	assert.Equal(t, d.Header.Revision, evs[3].Kv.ModRevision)
	assert.Equal(t, "2", string(evs[3].PrevKv.Value))

	// An exact-key watch does not see w/ab; NOPUT sees only deletes; a
	// range watch sees only its range.
	exact := cli.Watch(ctx, "w/a", clientv3.WithCreatedNotify())
	noput := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	rng := cli.Watch(ctx, "w/b", clientv3.WithRange("w/d"), clientv3.WithCreatedNotify())
	for _, w := range []clientv3.WatchChan{exact, noput, rng} {
		require.True(t, next(t, w).Created)
	}
	_, err = cli.Put(ctx, "w/ab", "y")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "w/d", "out of range")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "w/c", "in range")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "w/a", "3")
	require.NoError(t, err)
	_, err = cli.Delete(ctx, "w/ab")
	require.NoError(t, err)

	r := next(t, exact)
	require.Len(t, r.Events, 1)
	assert.Equal(t, "w/a", string(r.Events[0].Kv.Key))
	assert.Equal(t, "3", string(r.Events[0].Kv.Value))
	r = next(t, noput)
	require.Len(t, r.Events, 1)
	assert.Equal(t, mvccpb.DELETE, r.Events[0].Type)
	r = next(t, rng)
	require.Len(t, r.Events, 1)
	assert.Equal(t, "w/c", string(r.Events[0].Kv.Key))

	// A progress request: every watch of the stream hears it, at a
	// revision past every change it saw.
	g, err := cli.Get(ctx, "w/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.NoError(t, cli.RequestProgress(ctx))
	pr := next(t, exact)
	assert.True(t, pr.IsProgressNotify())
	assert.GreaterOrEqual(t, pr.Header.Revision, g.Header.Revision)

	// A client-chosen... cancel: closing the watch's context ends it.
	wctx, wcancel := contextWithCancel(ctx)
	cw := cli.Watch(wctx, "w/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	require.True(t, next(t, cw).Created)
	wcancel()
	require.Eventually(t, func() bool {
		select {
		case _, ok := <-cw:
			return !ok
		default:
			return false
		}
	}, 20*time.Second, 10*time.Millisecond)
}

// TestWatchProgressNotify hears of a quiet range on a timer.
func TestWatchProgressNotify(t *testing.T) {
	f := newFront(t, nil, WithProgressInterval(100*time.Millisecond))
	cli := f.client(t)
	ctx := tctx(t)
	p, err := cli.Put(ctx, "q", "1")
	require.NoError(t, err)
	wc := cli.Watch(ctx, "quiet/", clientv3.WithPrefix(), clientv3.WithProgressNotify())
	r := next(t, wc)
	for len(r.Events) == 0 && !r.IsProgressNotify() {
		r = next(t, wc)
	}
	assert.True(t, r.IsProgressNotify())
	assert.GreaterOrEqual(t, r.Header.Revision, p.Header.Revision)
}

// TestCompacted: a watch or a read from before the retained history
// gets etcd's compaction answers.
func TestCompacted(t *testing.T) {
	f := newFront(t, []coordtest.Option{coordtest.WithConfig(func(i int, cfg *coord.Config) {
		cfg.HistoryRevisions = 10
	})})
	cli := f.client(t)
	ctx := tctx(t)
	first, err := cli.Put(ctx, "c", "0")
	require.NoError(t, err)
	for i := range 50 {
		_, err := cli.Put(ctx, "c", fmt.Sprint(i))
		require.NoError(t, err)
	}
	wc := cli.Watch(ctx, "c", clientv3.WithRev(first.Header.Revision))
	r := next(t, wc)
	for !r.Canceled {
		r = next(t, wc)
	}
	assert.ErrorIs(t, r.Err(), rpctypes.ErrCompacted)
	assert.Greater(t, r.CompactRevision, first.Header.Revision)

	// Watching from the compact revision works. Each member keeps its
	// own history, so a member that had applied more when asked may say
	// a later compact revision: a client that restarts from the revision
	// it is told gets there.
	for try := 0; ; try++ {
		r2 := next(t, cli.Watch(ctx, "c", clientv3.WithRev(r.CompactRevision)))
		if r2.CompactRevision != 0 && try < 5 {
			require.GreaterOrEqual(t, r2.CompactRevision, r.CompactRevision)
			r = r2
			continue
		}
		require.NoError(t, r2.Err())
		require.NotEmpty(t, r2.Events)
		break
	}

	_, err = cli.Get(ctx, "c", clientv3.WithRev(first.Header.Revision))
	require.ErrorIs(t, err, rpctypes.ErrCompacted)
	_, err = cli.Compact(ctx, first.Header.Revision)
	require.NoError(t, err)
	_, err = cli.Compact(ctx, first.Header.Revision+1000)
	require.ErrorIs(t, err, rpctypes.ErrFutureRev)
}
