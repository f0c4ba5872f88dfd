package coord_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// What etcd users reach for in a read: a past revision (WithRev), a
// [start, end) range, keys or count only, a sort before the limit, the
// revision filters, and the count that says a limited read was cut
// (Counted) — on a member and through a client alike.

// TestReadAtRev: Get and List as of a past revision see a key put,
// deleted and created again as it was then; the revision returned is the
// current one; a revision not yet reached is ErrFutureRev, one older
// than the history a *CompactedError.
func TestReadAtRev(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithClients(), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		cfg.HistoryRevisions = 20
	}))
	ctx := ctxT(t, 60*time.Second)
	cl := connect(t, c)
	n := c.Leader()
	v1, err := n.Put(ctx, "r/a", []byte("a1"))
	require.NoError(t, err)
	_, err = n.Put(ctx, "r/b", []byte("b1"))
	require.NoError(t, err)
	delRev, err := n.Delete(ctx, "r/a")
	require.NoError(t, err)
	v2, err := n.Put(ctx, "r/a", []byte("a2"))
	require.NoError(t, err)
	for name, cell := range map[string]coord.Cell{"member": c.Node(1), "client": cl} {
		kv, err := cell.Get(ctx, "r/a", coord.WithRev(v1.ModRev))
		require.NoError(t, err, name)
		require.Equal(t, "a1", string(kv.Value), name)
		require.Equal(t, v1.CreateRev, kv.CreateRev, name)
		_, err = cell.Get(ctx, "r/a", coord.WithRev(delRev))
		require.ErrorIs(t, err, coord.ErrNotFound, "%s: deleted at that revision", name)
		kv, err = cell.Get(ctx, "r/a", coord.WithRev(v2.ModRev), coord.KeysOnly())
		require.NoError(t, err, name)
		require.Nil(t, kv.Value, name)
		require.Equal(t, v2.CreateRev, kv.CreateRev, name)

		kvs, rev, err := cell.List(ctx, "r/", coord.WithRev(delRev))
		require.NoError(t, err, name)
		require.Equal(t, []string{"r/b"}, keyNames(kvs), name)
		require.GreaterOrEqual(t, rev, v2.ModRev, "%s: the header revision is the current one", name)
		kvs, _, err = cell.List(ctx, "r/", coord.WithRev(v1.ModRev), coord.Serializable())
		require.NoError(t, err, name)
		require.Equal(t, []string{"r/a"}, keyNames(kvs), name)

		_, err = cell.Get(ctx, "r/a", coord.WithRev(rev+1000))
		require.ErrorIs(t, err, coord.ErrFutureRev, name)
		_, _, err = cell.List(ctx, "r/", coord.WithRev(-1))
		require.ErrorIs(t, err, coord.ErrInvalidArgument, name)
	}
	// Push the history past its window: the first revisions go.
	for i := range 40 {
		_, err := n.Put(ctx, fmt.Sprintf("r/x%d", i%3), []byte("x"))
		require.NoError(t, err)
	}
	for name, cell := range map[string]coord.Cell{"member": c.Node(2), "client": cl} {
		require.Eventually(t, func() bool {
			_, err := cell.Get(ctx, "r/a", coord.WithRev(v1.ModRev))
			return errors.Is(err, coord.ErrCompacted)
		}, 30*time.Second, 10*time.Millisecond, "%s: never compacted", name)
		_, _, err := cell.List(ctx, "r/", coord.WithRev(v1.ModRev))
		var ce *coord.CompactedError
		require.True(t, errors.As(err, &ce), "%s: %v", name, err)
		require.Greater(t, ce.Oldest, v1.ModRev+1, name)
		_, _, err = cell.List(ctx, "r/", coord.WithRev(ce.Oldest-1))
		require.NoError(t, err, "%s: the oldest revision minus one is served", name)
	}
}

// TestListRangeAndCount: Range, Limit, After, Counted, KeysOnly,
// CountOnly, SortBy and the filters, as etcd's Range has them, through
// a Namespace too.
func TestListRangeAndCount(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithClients())
	ctx := ctxT(t, 60*time.Second)
	cl := connect(t, c)
	n := c.Leader()
	var revs []int64
	for _, k := range []string{"g/a", "g/b", "g/c", "g/d", "h/a"} {
		kv, err := n.Put(ctx, k, []byte("v-"+k))
		require.NoError(t, err)
		revs = append(revs, kv.ModRev)
	}
	_, err := n.Put(ctx, "g/b", []byte("v-again")) // g/b: version 2, the newest ModRev
	require.NoError(t, err)
	for name, cell := range map[string]coord.Cell{"member": c.Node(1), "client": cl} {
		kvs, _, err := cell.List(ctx, "g/b", coord.Range("g/d"))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/b", "g/c"}, keyNames(kvs), name)
		kvs, _, err = cell.List(ctx, "g/c", coord.Range("\x00"))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/c", "g/d", "h/a"}, keyNames(kvs), "%s: \\x00 is every key from the start", name)
		kvs, _, err = cell.List(ctx, "g/c", coord.Range(""))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/c"}, keyNames(kvs), "%s: an empty end is the key alone", name)
		kvs, _, err = cell.List(ctx, "g/d", coord.Range("g/a"))
		require.NoError(t, err, name)
		require.Empty(t, kvs, "%s: an end before the start", name)

		var count int64
		kvs, _, err = cell.List(ctx, "g/", coord.Limit(2), coord.Counted(&count))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/a", "g/b"}, keyNames(kvs), name)
		require.EqualValues(t, 4, count, "%s: count before the limit: more = count > len", name)
		kvs, _, err = cell.List(ctx, "g/a", coord.Range("h/b"), coord.After("g/c"), coord.Limit(5), coord.Counted(&count))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/d", "h/a"}, keyNames(kvs), name)
		require.EqualValues(t, 2, count, name)
		kvs, _, err = cell.List(ctx, "g/", coord.CountOnly(), coord.Counted(&count))
		require.NoError(t, err, name)
		require.Empty(t, kvs, name)
		require.EqualValues(t, 4, count, name)
		kvs, _, err = cell.List(ctx, "g/", coord.KeysOnly())
		require.NoError(t, err, name)
		require.Len(t, kvs, 4, name)
		for _, kv := range kvs {
			require.Nil(t, kv.Value, name)
		}

		kvs, _, err = cell.List(ctx, "g/", coord.SortBy(coord.SortByModRev, coord.SortDescend), coord.Limit(1))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/b"}, keyNames(kvs), name)
		kvs, _, err = cell.List(ctx, "g/", coord.SortBy(coord.SortByKey, coord.SortDescend))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/d", "g/c", "g/b", "g/a"}, keyNames(kvs), name)
		kvs, _, err = cell.List(ctx, "g/", coord.SortBy(coord.SortByVersion, coord.SortDescend), coord.Limit(1))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/b"}, keyNames(kvs), name)
		// concurrency.Mutex's wait: the newest key created before mine.
		kvs, _, err = cell.List(ctx, "g/", coord.SortBy(coord.SortByCreateRev, coord.SortDescend), coord.Limit(1),
			coord.MaxCreateRev(revs[3]-1))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/c"}, keyNames(kvs), name)
		kvs, _, err = cell.List(ctx, "g/", coord.MinModRev(revs[2]), coord.MaxModRev(revs[3]))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/c", "g/d"}, keyNames(kvs), name)
		kvs, _, err = cell.List(ctx, "g/", coord.MinCreateRev(revs[1]), coord.SortBy(coord.SortByValue, coord.SortAscend))
		require.NoError(t, err, name)
		require.Equal(t, []string{"g/b", "g/c", "g/d"}, keyNames(kvs), "%s: v-again before v-g/c", name)

		ns := coord.Namespace(cell, "g/")
		kvs, _, err = ns.List(ctx, "b", coord.Range("\x00"), coord.Counted(&count))
		require.NoError(t, err, name)
		require.Equal(t, []string{"b", "c", "d"}, keyNames(kvs), "%s: a range ends in its namespace", name)
		require.EqualValues(t, 3, count, name)
		kvs, _, err = ns.List(ctx, "a", coord.Range("c"))
		require.NoError(t, err, name)
		require.Equal(t, []string{"a", "b"}, keyNames(kvs), name)

		for _, opt := range []coord.ReadOption{coord.Range("z"), coord.CountOnly(), coord.Counted(&count),
			coord.SortBy(coord.SortByValue, coord.SortAscend), coord.MinModRev(1)} {
			_, err = cell.Get(ctx, "g/a", opt)
			require.ErrorIs(t, err, coord.ErrInvalidArgument, "%s: Get takes no ranged options", name)
		}
		_, _, err = cell.List(ctx, "g/", coord.SortBy(coord.SortTarget(9), coord.SortAscend))
		require.ErrorIs(t, err, coord.ErrInvalidArgument, name)
		_, _, err = cell.List(ctx, "g/", coord.SortBy(coord.SortByKey, coord.SortOrder(7)))
		require.ErrorIs(t, err, coord.ErrInvalidArgument, name)
		_, _, err = cell.List(ctx, "g/", coord.MinModRev(-1))
		require.ErrorIs(t, err, coord.ErrInvalidArgument, name)
	}
}

// TestWatchExactKeyAndRange: ExactKey watches one key (not the keys it
// prefixes), WatchRange a [start, end) range, each batch of a revision
// still closed by EndOfRev; on a member, through a client, through a
// Namespace and with ListWatch.
func TestWatchExactKeyAndRange(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithClients())
	ctx := ctxT(t, 60*time.Second)
	cl := connect(t, c)
	n := c.Leader()
	for name, cell := range map[string]coord.Cell{"member": c.Node(1), "client": cl} {
		p := name + "/"
		start, err := n.Put(ctx, p+"sched", []byte("0"))
		require.NoError(t, err)
		exact := cell.Watch(ctx, p+"sched", coord.ExactKey(), coord.FromRev(start.ModRev))
		ranged := cell.Watch(ctx, p+"b", coord.WatchRange(p+"d"), coord.FromRev(start.ModRev))
		ns := coord.Namespace(cell, p).Watch(ctx, "c", coord.WatchRange("\x00"), coord.FromRev(start.ModRev))
		_, err = n.Txn(ctx).Then(coord.OpPut(p+"sched2", []byte("x")), coord.OpPut(p+"sched", []byte("1")),
			coord.OpPut(p+"a", nil), coord.OpPut(p+"b", nil), coord.OpPut(p+"c9", nil), coord.OpPut(p+"d", nil)).Commit()
		require.NoError(t, err)
		last, err := n.Put(ctx, p+"sched", []byte("2"))
		require.NoError(t, err)
		collect := func(w *coord.Watcher, until int64) []string {
			var got []string
			for ev := range w.Events() {
				got = append(got, fmt.Sprintf("%s@%d:%v", ev.KV.Key, ev.Rev, ev.EndOfRev))
				if ev.Rev >= until && ev.EndOfRev {
					// Events of later revisions may already be on their
					// way: Close ends the watch, not what it sent.
					w.Close()
					break
				}
			}
			for range w.Events() {
			}
			return got
		}
		r1 := last.ModRev - 1
		require.Equal(t, []string{fmt.Sprintf("%ssched@%d:true", p, r1), fmt.Sprintf("%ssched@%d:true", p, last.ModRev)},
			collect(exact, last.ModRev), name)
		require.Equal(t, []string{fmt.Sprintf("%sb@%d:false", p, r1), fmt.Sprintf("%sc9@%d:true", p, r1)},
			collect(ranged, r1), name)
		require.Equal(t, []string{fmt.Sprintf("sched2@%d:false", r1), fmt.Sprintf("sched@%d:false", r1),
			fmt.Sprintf("c9@%d:false", r1), fmt.Sprintf("d@%d:true", r1)}, collect(ns, r1), "%s: in the order applied", name)

		// ListWatch with ExactKey lists the key alone.
		lctx, cancel := context.WithCancel(ctx)
		var listed []string
		err = cell.ListWatch(lctx, p+"sched", func(kvs []coord.KV, rev int64) error {
			listed = keyNames(kvs)
			cancel()
			return nil
		}, func(coord.Event) error { return nil }, coord.ExactKey())
		require.ErrorIs(t, err, context.Canceled, name)
		require.Equal(t, []string{p + "sched"}, listed, name)

		w := cell.Watch(ctx, "", coord.ExactKey())
		for range w.Events() {
		}
		require.ErrorIs(t, w.Err(), coord.ErrInvalidKey, name)
		w = cell.Watch(ctx, "k", coord.ExactKey(), coord.WatchRange("z"))
		for range w.Events() {
		}
		require.ErrorIs(t, w.Err(), coord.ErrInvalidArgument, name)
	}
}

// TestTxnSessionCompare: SessionOf compares the session that owns a key
// (etcd's lease compare): the owner's ID while the key is ephemeral, 0
// for an ordinary or absent key; on a member and through a client.
func TestTxnSessionCompare(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithClients())
	ctx := ctxT(t, 60*time.Second)
	cl := connect(t, c)
	for name, cell := range map[string]coord.Cell{"member": c.Node(1), "client": cl} {
		s, err := cell.NewSession(ctx)
		require.NoError(t, err, name)
		eph, plain := name+"/eph", name+"/plain"
		_, err = cell.Put(ctx, eph, []byte("x"), coord.Ephemeral(s))
		require.NoError(t, err, name)
		_, err = cell.Put(ctx, plain, []byte("x"))
		require.NoError(t, err, name)
		id := int64(s.ID())
		for _, tc := range []struct {
			cmp  coord.Cmp
			want bool
		}{
			{coord.SessionOf(eph).Eq(id), true},
			{coord.SessionOf(eph).Ne(id), false},
			{coord.SessionOf(eph).Gt(0), true},
			{coord.SessionOf(plain).Eq(0), true},
			{coord.SessionOf(name + "/absent").Eq(0), true},
			{coord.SessionOf(plain).Eq(id), false},
		} {
			res, err := cell.Txn(ctx).If(tc.cmp).Commit()
			require.NoError(t, err, name)
			require.Equal(t, tc.want, res.Succeeded, "%s: %+v", name, tc.cmp)
		}
		// A write guarded by it, as etcd's lease compare guards one.
		res, err := cell.Txn(ctx).If(coord.SessionOf(eph).Eq(id)).Then(coord.OpPut(name+"/guarded", []byte("y"))).Commit()
		require.NoError(t, err, name)
		require.True(t, res.Succeeded, name)
		require.NoError(t, s.Close(ctx), name)
		res, err = cell.Txn(ctx).If(coord.SessionOf(eph).Eq(id)).Commit()
		require.NoError(t, err, name)
		require.False(t, res.Succeeded, "%s: the key went with its session", name)
	}
}
