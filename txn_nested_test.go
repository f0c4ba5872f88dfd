package coord_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// nest is OpTxn without compares when cmps is nil.
func nest(cmps []coord.Cmp, then, els []coord.Op) coord.Op { return coord.OpTxn(cmps, then, els) }

// TestTxnNested: nested transactions on a member and through a client,
// with etcd's semantics: every compare on the path sees the state before
// the transaction, the ops see the writes before them, one revision for
// all; a nested transaction of gets is a read; the duplicate rule counts
// nested writes; depth and op count are bounded.
func TestTxnNested(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithClients())
		ctx := ctxT(t, 60*time.Second)
		cl := connect(t, c)
		for name, cell := range map[string]coord.Cell{"member": c.Node(1), "client": cl} {
			p := name + "/"
			_, err := cell.Put(ctx, p+"a", []byte("1"))
			require.NoError(t, err, name)

			res, err := cell.Txn(ctx).If(coord.Version(p+"a").Eq(1)).Then(
				nest(nil, []coord.Op{coord.OpPut(p+"a", []byte("2"))}, nil),
				// a is at version 2 by now; the compare sees version 1.
				nest([]coord.Cmp{coord.Version(p + "a").Eq(1)},
					[]coord.Op{coord.OpGet(p + "a"), coord.OpPut(p+"b", []byte("x"))},
					[]coord.Op{coord.OpPut(p+"c", []byte("never"))}),
				nest([]coord.Cmp{coord.Version(p + "b").Gt(0)},
					[]coord.Op{coord.OpPut(p+"d", []byte("never"))},
					[]coord.Op{coord.OpGet(p + "b"), nest(nil, []coord.Op{coord.OpDelete(p + "a")}, nil)}),
			).Commit()
			require.NoError(t, err, name)
			require.True(t, res.Succeeded, name)
			require.Len(t, res.Results, 3, name)
			first, second, third := res.Results[0].Txn, res.Results[1].Txn, res.Results[2].Txn
			require.True(t, first.Succeeded, name)
			require.Equal(t, res.Rev, first.Results[0].KVs[0].ModRev, "%s: one revision", name)
			require.True(t, second.Succeeded, "%s: compares see the state before the transaction", name)
			require.Equal(t, "2", string(second.Results[0].KVs[0].Value), "%s: ops see the writes before them", name)
			require.False(t, third.Succeeded, "%s: b did not exist before the transaction", name)
			require.Equal(t, "x", string(third.Results[0].KVs[0].Value), name)
			require.EqualValues(t, 1, third.Results[1].Txn.Results[0].Deleted, name)
			_, err = cell.Get(ctx, p+"a")
			require.ErrorIs(t, err, coord.ErrNotFound, "%s: put, then deleted by a later nested transaction", name)
			for _, k := range []string{"c", "d"} {
				_, err = cell.Get(ctx, p+k)
				require.ErrorIs(t, err, coord.ErrNotFound, "%s: %s", name, k)
			}

			// A namespace reaches into nested transactions.
			ns := coord.Namespace(cell, p+"ns/")
			res, err = ns.Txn(ctx).Then(nest([]coord.Cmp{coord.Version("k").Eq(0)},
				[]coord.Op{coord.OpPut("k", []byte("v"))}, nil)).Commit()
			require.NoError(t, err, name)
			require.Equal(t, "k", res.Results[0].Txn.Results[0].KVs[0].Key, name)
			got, err := cell.Get(ctx, p+"ns/k")
			require.NoError(t, err, name)
			require.Equal(t, "v", string(got.Value), name)
		}

		// A nested transaction of gets only is a read: the log does not
		// move.
		before := settledIndexes(t, c)
		for name, cell := range map[string]coord.Cell{"member": c.Node(2), "client": cl} {
			res, err := cell.Txn(ctx).Then(coord.OpGet("member/b"), nest([]coord.Cmp{coord.Value("member/b").Eq([]byte("x"))},
				[]coord.Op{coord.OpGetPrefix("client/")}, []coord.Op{coord.OpGet("never")})).Commit()
			require.NoError(t, err, name)
			require.True(t, res.Results[1].Txn.Succeeded, name)
			require.Len(t, res.Results[1].Txn.Results[0].KVs, 2, "%s: client/b and client/ns/k", name)
		}
		require.Equal(t, before, settledIndexes(t, c), "a read-only nested transaction entered the log")

		// Refused before anything is proposed: etcd's duplicate rule
		// across nesting, depth and the op count.
		one := []byte("1")
		deep := coord.OpPut("deep", one)
		for range 9 {
			deep = nest(nil, []coord.Op{deep}, nil)
		}
		wide := make([]coord.Op, 130)
		for i := range wide {
			wide[i] = coord.OpGet(fmt.Sprint(i))
		}
		for name, cell := range map[string]coord.Cell{"member": c.Node(0), "client": cl} {
			for why, ops := range map[string][]coord.Op{
				"put, nested delete":       {coord.OpPut("k", one), nest(nil, nil, []coord.Op{coord.OpDelete("k")})},
				"prefix delete, deep put":  {coord.OpDeletePrefix("k"), nest(nil, []coord.Op{nest(nil, []coord.Op{coord.OpPut("k/1", one)}, nil)}, nil)},
				"nested delete, later put": {nest(nil, []coord.Op{coord.OpDelete("k")}, nil), nest(nil, []coord.Op{coord.OpPut("k", one)}, nil)},
				"two nested puts":          {nest(nil, []coord.Op{coord.OpPut("k", one)}, nil), nest(nil, nil, []coord.Op{coord.OpPut("k", one)})},
			} {
				_, err := cell.Txn(ctx).Then(ops...).Commit()
				require.ErrorIs(t, err, coord.ErrInvalidArgument, "%s: %s", name, why)
			}
			_, err := cell.Txn(ctx).Then(deep).Commit()
			require.ErrorIs(t, err, coord.ErrTooManyOps, "%s: nested 9 deep", name)
			_, err = cell.Txn(ctx).Then(nest(nil, wide[:64], wide[64:])).Commit()
			require.ErrorIs(t, err, coord.ErrTooManyOps, "%s: 131 ops across nesting", name)
			_, err = cell.Txn(ctx).Then(nest(nil, []coord.Op{coord.OpPut("x", one, coord.IfVersion(0))}, nil)).Commit()
			require.ErrorIs(t, err, coord.ErrInvalidArgument, "%s: a nested op's own error", name)
			// etcd allows these.
			_, err = cell.Txn(ctx).Then(
				nest(nil, []coord.Op{coord.OpPut(name+"/k", one)}, []coord.Op{coord.OpPut(name+"/k", one)}),
				nest(nil, []coord.Op{coord.OpDelete(name + "/k")}, nil),
			).Commit()
			require.NoError(t, err, "%s: both branches put, a later one deletes", name)
		}
		require.Equal(t, before[0]+2, settledIndexes(t, c)[0], "only the two allowed transactions were proposed")
	})
}

// TestTxnNestedGrant: a client's write grant holds for a nested
// transaction's writes as for the top's.
func TestTxnNestedGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 1, coordtest.WithClients(), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
			cfg.ClientPolicy = func(string) (coord.ClientGrant, error) {
				return coord.ClientGrant{WritePrefixes: []string{"mine/"}}, nil
			}
		}))
		ctx := ctxT(t, 30*time.Second)
		cl := connect(t, c)
		_, err := cl.Txn(ctx).Then(nest(nil, []coord.Op{coord.OpPut("mine/a", nil)}, nil)).Commit()
		require.NoError(t, err)
		_, err = cl.Txn(ctx).Then(nest(nil, nil, []coord.Op{nest(nil, []coord.Op{coord.OpPut("theirs/a", nil)}, nil)})).Commit()
		require.ErrorIs(t, err, coord.ErrForbidden)
		_, err = c.Leader().Get(ctx, "theirs/a")
		require.ErrorIs(t, err, coord.ErrNotFound)
	})
}
