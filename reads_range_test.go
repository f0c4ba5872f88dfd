package coord_test

import (
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
