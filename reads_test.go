package coord_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// Reads cost what they say: a transaction that only reads is a read (a
// read index, then local state) and never a log entry; what one read or
// one transaction's reads may materialise is bounded in bytes; a List is
// paged with Limit and After.

// fill writes n keys prefix%05d with values of size bytes, many per
// transaction.
func fill(t *testing.T, ctx context.Context, c coord.Cell, prefix string, n, size int) {
	t.Helper()
	value := []byte(strings.Repeat("v", size))
	for i := 0; i < n; {
		var ops []coord.Op
		for ; i < n && len(ops) < 100; i++ {
			ops = append(ops, coord.OpPut(fmt.Sprintf("%s%05d", prefix, i), value))
		}
		_, err := c.Txn(ctx).Then(ops...).Commit()
		require.NoError(t, err)
	}
}

// settledIndexes waits until every member has applied its whole log and
// they agree on its end, then returns each member's last log index.
func settledIndexes(t *testing.T, c *coordtest.Cluster) []uint64 {
	t.Helper()
	var last []uint64
	require.Eventually(t, func() bool {
		last = last[:0]
		for i := range c.Size() {
			st := c.Node(i).Status()
			if st.Applied != st.LastIndex || st.Commit != st.LastIndex {
				return false
			}
			last = append(last, st.LastIndex)
		}
		return slices.Min(last) == slices.Max(last)
	}, 30*time.Second, 5*time.Millisecond, "members never settled (seed %d)", c.Seed())
	return slices.Clone(last)
}

// readOnly grants a client no writes at all.
func readOnly(string) (coord.ClientGrant, error) { return coord.ClientGrant{}, nil }

// TestReadOnlyTxnIsARead: a transaction of gets only (in If, Then and
// Else) is served by read index from local state, on a member and
// through a client: the log does not move. The attack of a client with
// no write grant, one transaction of 128 OpGetPrefix("") over 10,000
// keys of 100 B (1.9 GB and 7 s without writes before), is refused with
// ErrReadTooLarge after reading at most Config.MaxReadBytes, and also
// writes nothing to the log.
func TestReadOnlyTxnIsARead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithClients(), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
			cfg.ClientPolicy = readOnly
		}))
		ctx := ctxT(t, 120*time.Second)
		fill(t, ctx, c.Leader(), "k/", 10_000, 100)
		cl := connect(t, c)
		before := settledIndexes(t, c)

		for name, cell := range map[string]coord.Cell{"client": cl, "member": c.Node(1)} {
			res, err := cell.Txn(ctx).If(coord.Version("k/00000").Eq(1)).
				Then(coord.OpGet("k/00000"), coord.OpGetPrefix("k/0000")).
				Else(coord.OpGetPrefix("none/")).
				Commit()
			require.NoError(t, err, name)
			require.True(t, res.Succeeded, name)
			require.Len(t, res.Results, 2, name)
			require.Len(t, res.Results[0].KVs, 1, name)
			require.Len(t, res.Results[1].KVs, 10, name)
			require.Equal(t, "k/00009", res.Results[1].KVs[9].Key, name)
			require.GreaterOrEqual(t, res.Rev, res.Results[1].KVs[9].ModRev, name)
			require.Equal(t, before, settledIndexes(t, c), "%s: a read-only transaction entered the log", name)

			// The attack, as the issue ran it.
			ops := make([]coord.Op, 128)
			for i := range ops {
				ops[i] = coord.OpGetPrefix("")
			}
			start := time.Now()
			_, err = cell.Txn(ctx).Then(ops...).Commit()
			require.ErrorIs(t, err, coord.ErrReadTooLarge, name)
			t.Logf("%s: 128 x OpGetPrefix(\"\") over 10,000 keys refused in %v: %v", name, time.Since(start), err)
			require.Equal(t, before, settledIndexes(t, c), "%s: the refused transaction entered the log", name)
		}
	})
}

// TestWritingTxnReadBounded: a transaction that writes and reads more
// than Config.MaxReadBytes is refused with ErrReadTooLarge and changes
// nothing, on a member and through a client; one that reads less
// writes and reads as before.
func TestWritingTxnReadBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const limit = 16 << 10
		c := coordtest.NewCluster(t, 3, coordtest.WithClients(), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
			cfg.MaxReadBytes = limit
		}))
		ctx := ctxT(t, 60*time.Second)
		fill(t, ctx, c.Leader(), "q/", 300, 100) // about 50 KiB as reads count it
		cl := connect(t, c)

		for name, cell := range map[string]coord.Cell{"client": cl, "member": c.Node(2)} {
			w := "w/" + name
			settledIndexes(t, c) // every member has applied the writes so far
			rev := c.Node(0).Status().Revision
			_, err := cell.Txn(ctx).Then(coord.OpPut(w, []byte("x")), coord.OpGetPrefix("q/")).Commit()
			require.ErrorIs(t, err, coord.ErrReadTooLarge, name)
			_, err = cell.Txn(ctx).If(coord.Version(w).Eq(7)).
				Then(coord.OpPut(w, []byte("x"))).
				Else(coord.OpDelete("q/00000"), coord.OpGetPrefix("q/")).
				Commit()
			require.ErrorIs(t, err, coord.ErrReadTooLarge, "%s: in Else", name)
			gets := []coord.Op{coord.OpPut(w, []byte("x"))}
			for i := range 120 {
				gets = append(gets, coord.OpGet(fmt.Sprintf("q/%05d", i)))
			}
			_, err = cell.Txn(ctx).Then(gets...).Commit()
			require.ErrorIs(t, err, coord.ErrReadTooLarge, "%s: point gets", name)
			_, err = cell.Get(ctx, w)
			require.ErrorIs(t, err, coord.ErrNotFound, "%s: a refused transaction wrote", name)
			_, err = cell.Get(ctx, "q/00000")
			require.NoError(t, err, "%s: a refused transaction deleted", name)
			settledIndexes(t, c)
			for i := range c.Size() {
				require.Equal(t, rev, c.Node(i).Status().Revision, "%s: member %d moved", name, i)
			}

			res, err := cell.Txn(ctx).Then(coord.OpPut(w, []byte("x")), coord.OpGetPrefix("q/0000")).Commit()
			require.NoError(t, err, name)
			require.Len(t, res.Results[1].KVs, 10, name)
			got, err := cell.Get(ctx, w)
			require.NoError(t, err, name)
			require.Equal(t, "x", string(got.Value), name)
		}
	})
}

// TestListPages: Limit and After page through 10,000 keys, each exactly
// once and in key order, on a member, through a client and through a
// Namespace; a page shorter than the limit is the last.
func TestListPages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithClients())
		ctx := ctxT(t, 120*time.Second)
		fill(t, ctx, c.Leader(), "p/", 10_000, 10)
		fill(t, ctx, c.Leader(), "o/", 10, 10) // before the prefix
		fill(t, ctx, c.Leader(), "q/", 10, 10) // after it
		cl := connect(t, c)

		pageAll := func(name string, cell coord.Cell, prefix string, limit int) []string {
			var keys []string
			after := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 10_000/limit+2, "%s: pages never end", name)
				kvs, rev, err := cell.List(ctx, prefix, coord.Limit(limit), coord.After(after))
				require.NoError(t, err, name)
				require.LessOrEqual(t, len(kvs), limit, name)
				for _, kv := range kvs {
					require.Greater(t, kv.Key, after, name)
					require.LessOrEqual(t, kv.ModRev, rev, name)
					keys = append(keys, kv.Key)
					after = kv.Key
				}
				if len(kvs) < limit {
					return keys
				}
			}
		}
		want := make([]string, 10_000)
		for i := range want {
			want[i] = fmt.Sprintf("p/%05d", i)
		}
		for name, cell := range map[string]coord.Cell{"member": c.Node(1), "client": cl} {
			require.Equal(t, want, pageAll(name, cell, "p/", 1000), "%s: pages of 1000", name)
			require.Equal(t, want, pageAll(name, cell, "p/", 777), "%s: pages of 777", name)
			ns := pageAll(name, coord.Namespace(cell, "p/"), "", 3_000)
			require.Len(t, ns, len(want), name)
			require.Equal(t, "00000", ns[0], name)
			require.Equal(t, "09999", ns[len(ns)-1], name)

			kvs, _, err := cell.List(ctx, "p/", coord.After("p/09997"))
			require.NoError(t, err, name)
			require.Equal(t, []string{"p/09998", "p/09999"}, keyNames(kvs), "%s: After alone", name)
			kvs, _, err = cell.List(ctx, "p/", coord.After("a"), coord.Limit(2), coord.Serializable())
			require.NoError(t, err, name)
			require.Equal(t, []string{"p/00000", "p/00001"}, keyNames(kvs), "%s: After a key before the prefix", name)
			kvs, _, err = cell.List(ctx, "p/", coord.After("p/1"))
			require.NoError(t, err, name)
			require.Empty(t, kvs, "%s: After a key past the prefix", name)
			kvs, _, err = cell.List(ctx, "o/", coord.Limit(0))
			require.NoError(t, err, name)
			require.Len(t, kvs, 10, "%s: Limit(0) is no limit", name)

			_, _, err = cell.List(ctx, "p/", coord.Limit(-1))
			require.ErrorIs(t, err, coord.ErrInvalidArgument, name)
			_, err = cell.Get(ctx, "p/00000", coord.Limit(1))
			require.ErrorIs(t, err, coord.ErrInvalidArgument, "%s: Get takes no Limit", name)
			_, err = cell.Get(ctx, "p/00000", coord.After("p/"))
			require.ErrorIs(t, err, coord.ErrInvalidArgument, "%s: Get takes no After", name)
		}
	})
}

func keyNames(kvs []coord.KV) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key
	}
	return out
}

// TestListOverCap: a List that would return more than Config.MaxReadBytes
// fails with ErrReadTooLarge, saying to page it, on a member and
// through a client; pages of it work.
func TestListOverCap(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithClients(), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		cfg.MaxReadBytes = 64 << 10
	}))
	ctx := ctxT(t, 60*time.Second)
	fill(t, ctx, c.Leader(), "big/", 1000, 100) // about 170 KiB as reads count it
	cl := connect(t, c)
	for name, cell := range map[string]coord.Cell{"member": c.Node(0), "client": cl} {
		for _, opts := range [][]coord.ReadOption{nil, {coord.Serializable()}, {coord.Limit(900)}} {
			_, _, err := cell.List(ctx, "big/", opts...)
			require.ErrorIs(t, err, coord.ErrReadTooLarge, name)
			require.Contains(t, err.Error(), "Limit", "%s: the error says how to page", name)
		}
		kvs, _, err := cell.List(ctx, "big/", coord.Limit(200))
		require.NoError(t, err, name)
		require.Len(t, kvs, 200, name)
	}
}

// TestTxnDuplicateKey: a transaction whose branch writes one key twice
// (two puts, a put and a delete, a put under a prefix delete) is refused
// with ErrInvalidArgument before anything is proposed, on a member,
// through a client and from a hand-made command; the two branches may
// write the same key, and deletes may overlap, as etcd allows.
func TestTxnDuplicateKey(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 1, nil)
	ctx := ctxT(t, 30*time.Second)
	n := c.Leader()
	_, err := n.Put(ctx, "d/a", []byte("0"))
	require.NoError(t, err)
	cl, err := coord.Connect(ctx, coord.ClientConfig{Name: "dup", Members: []string{n.Admin().ClientAddr()}})
	require.NoError(t, err)
	defer cl.Close()
	one := []byte("1")
	bad := map[string][]coord.Op{
		"two puts":          {coord.OpPut("d/a", one), coord.OpPut("d/a", one)},
		"put then delete":   {coord.OpPut("d/a", one), coord.OpDelete("d/a")},
		"delete then put":   {coord.OpDelete("d/a"), coord.OpPut("d/a", one)},
		"put under prefix":  {coord.OpPut("d/a", one), coord.OpDeletePrefix("d/")},
		"prefix before put": {coord.OpDeletePrefix("d"), coord.OpGet("x"), coord.OpPut("d/b", one)},
	}
	rc, err := dialRaw(t, ctx, n.Admin().ClientAddr(), "raw")
	require.NoError(t, err)
	// Every refusal, with the log's last index around them: unchanged if
	// none was proposed. The cell may append an entry of its own meanwhile
	// (on a busy machine, once in a suite's run), so three tries; a
	// refused transaction proposed would add one to each.
	refuseAll := func() (proposed bool) {
		before := n.Status().LastIndex
		for name, ops := range bad {
			for cname, cell := range map[string]coord.Cell{"member": n, "client": cl} {
				_, err := cell.Txn(ctx).Then(ops...).Commit()
				require.ErrorIs(t, err, coord.ErrInvalidArgument, "%s, %s", cname, name)
				_, err = cell.Txn(ctx).If(coord.Version("d/a").Eq(9)).Else(ops...).Commit()
				require.ErrorIs(t, err, coord.ErrInvalidArgument, "%s, %s in Else", cname, name)
			}
		}
		_, err = rc.propose(t, ctx, &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{
			{Type: command.OpPut, Key: "d/a", Value: one}, {Type: command.OpPut, Key: "d/a", Value: []byte("2")}}}})
		require.Equal(t, clientwire.CodeInvalidArgument, wireCode(err), "a hand-made command: %v", err)
		return n.Status().LastIndex != before
	}
	proposed := true
	for try := 0; try < 3 && proposed; try++ {
		proposed = refuseAll()
	}
	require.False(t, proposed, "a refused transaction was proposed (the log grew in each of three tries)")
	got, err := n.Get(ctx, "d/a")
	require.NoError(t, err)
	require.Equal(t, "0", string(got.Value))

	for cname, cell := range map[string]coord.Cell{"member": n, "client": cl} {
		_, err := cell.Txn(ctx).If(coord.Version("d/a").Gt(0)).
			Then(coord.OpPut("d/a", []byte(cname))).Else(coord.OpPut("d/a", one)).Commit()
		require.NoError(t, err, "%s: each branch writes the key once", cname)
		_, err = cell.Txn(ctx).Then(coord.OpDelete("d/x"), coord.OpDeletePrefix("d/x"), coord.OpDelete("d/x")).Commit()
		require.NoError(t, err, "%s: deletes may overlap", cname)
	}
}
