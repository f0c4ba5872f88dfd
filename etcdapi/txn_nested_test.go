package etcdapi

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestTxnNestedClientv3: clientv3.OpTxn through the front, with etcd's
// semantics: the nested compares see the state before the transaction,
// the nested ops the writes before them; the response nests.
func TestTxnNestedClientv3(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t)
	ctx := tctx(t)
	p, err := cli.Put(ctx, "a", "1")
	require.NoError(t, err)

	r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "1")).Then(
		clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("a", "2", clientv3.WithPrevKV())}, nil),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value("a"), "=", "1")},
			[]clientv3.Op{clientv3.OpGet("a"), clientv3.OpPut("b", "x")},
			[]clientv3.Op{clientv3.OpPut("c", "never")}),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Version("b"), ">", 0)},
			[]clientv3.Op{clientv3.OpPut("d", "never")},
			[]clientv3.Op{clientv3.OpGet("b"), clientv3.OpDelete("a", clientv3.WithPrevKV())}),
	).Commit()
	require.NoError(t, err)
	require.True(t, r.Succeeded)
	require.Equal(t, p.Header.Revision+1, r.Header.Revision, "one revision")
	require.Len(t, r.Responses, 3)
	first := r.Responses[0].GetResponseTxn()
	require.NotNil(t, first)
	require.True(t, first.Succeeded)
	require.Equal(t, "1", string(first.Responses[0].GetResponsePut().PrevKv.Value))
	second := r.Responses[1].GetResponseTxn()
	require.True(t, second.Succeeded, "the compare sees a before the transaction")
	require.Equal(t, "2", string(second.Responses[0].GetResponseRange().Kvs[0].Value), "the get sees the put before it")
	require.NotNil(t, second.Responses[1].GetResponsePut())
	third := r.Responses[2].GetResponseTxn()
	require.False(t, third.Succeeded, "b did not exist before the transaction")
	require.Equal(t, "x", string(third.Responses[0].GetResponseRange().Kvs[0].Value))
	del := third.Responses[1].GetResponseDeleteRange()
	require.EqualValues(t, 1, del.Deleted)
	require.Equal(t, "2", string(del.PrevKvs[0].Value))
	require.Equal(t, r.Header.Revision, third.Responses[0].GetResponseRange().Header.Revision, "inner ops carry the header")

	g, err := cli.Get(ctx, "", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, keysOfResp(g))

	// A nested transaction of reads only.
	r, err = cli.Txn(ctx).Then(clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value("b"), "=", "y")},
		[]clientv3.Op{clientv3.OpGet("never")},
		[]clientv3.Op{clientv3.OpGet("", clientv3.WithPrefix())})).Commit()
	require.NoError(t, err)
	in := r.Responses[0].GetResponseTxn()
	require.False(t, in.Succeeded)
	require.Len(t, in.Responses[0].GetResponseRange().Kvs, 1)
}

// TestTxnNestedDuplicateKeys runs etcd's TestV3TxnDuplicateKeys
// (tests/integration/v3_grpc_test.go) through clientv3: the same
// requests refused with ErrDuplicateKey, the same allowed.
func TestTxnNestedDuplicateKeys(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t)
	ctx := tctx(t)
	put := clientv3.OpPut("abc", "def")
	delKey := clientv3.OpDelete("abc")
	delIn := clientv3.OpDelete("a", clientv3.WithRange("b"))
	delOut := clientv3.OpDelete("abb", clientv3.WithRange("abc"))
	txnDel := clientv3.OpTxn(nil, []clientv3.Op{delIn}, nil)
	txnDelTwoSide := clientv3.OpTxn(nil, []clientv3.Op{delIn}, []clientv3.Op{delIn})
	txnPut := clientv3.OpTxn(nil, []clientv3.Op{put}, nil)
	txnPutTwoSide := clientv3.OpTxn(nil, []clientv3.Op{put}, []clientv3.Op{put})
	for i, tc := range []struct {
		then []clientv3.Op
		dup  bool
	}{
		{[]clientv3.Op{put, put}, true},
		{[]clientv3.Op{put, delKey}, true},
		{[]clientv3.Op{put, delIn}, true},
		{[]clientv3.Op{put, txnDel}, true},
		{[]clientv3.Op{delIn, txnPut}, true},
		{[]clientv3.Op{txnPutTwoSide, txnPutTwoSide}, true},
		{[]clientv3.Op{delOut, txnPutTwoSide}, false},
		{[]clientv3.Op{txnDel, txnDelTwoSide}, false},
		{[]clientv3.Op{delKey, delIn, delKey, delIn}, false},
		{[]clientv3.Op{put, delOut}, false},
		// checkIntervals beyond etcd's table: an earlier nested put, a
		// later nested delete (etcd allows it) and the other way round.
		{[]clientv3.Op{txnPut, clientv3.OpTxn(nil, []clientv3.Op{delKey}, nil)}, false},
		{[]clientv3.Op{clientv3.OpTxn(nil, []clientv3.Op{delKey}, nil), txnPut}, true},
	} {
		_, err := cli.Txn(ctx).Then(tc.then...).Commit()
		if tc.dup {
			require.ErrorIs(t, err, rpctypes.ErrDuplicateKey, "case %d", i)
		} else {
			require.NoError(t, err, "case %d", i)
		}
	}
}

// TestTxnNestedLimits: etcd's op budget (a nested transaction gets what
// its parent leaves of --max-txn-ops) and coord's depth bound.
func TestTxnNestedLimits(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t)
	ctx := tctx(t)
	gets := func(n int) []clientv3.Op {
		ops := make([]clientv3.Op, n)
		for i := range ops {
			ops[i] = clientv3.OpGet(fmt.Sprint(i))
		}
		return ops
	}
	_, err := cli.Txn(ctx).Then(append(gets(100), clientv3.OpTxn(nil, gets(28), nil))...).Commit()
	require.ErrorIs(t, err, rpctypes.ErrTooManyOps, "101 at the top leave 27")
	_, err = cli.Txn(ctx).Then(append(gets(99), clientv3.OpTxn(nil, gets(14), gets(14)))...).Commit()
	require.NoError(t, err, "100 at the top leave 28 a branch")

	deep := clientv3.OpPut("deep", "x")
	for range 9 {
		deep = clientv3.OpTxn(nil, []clientv3.Op{deep}, nil)
	}
	_, err = cli.Txn(ctx).Then(deep).Commit()
	require.ErrorIs(t, err, rpctypes.ErrTooManyOps, "coord nests 8 deep at most")
	g, err := cli.Get(ctx, "deep")
	require.NoError(t, err)
	require.Empty(t, g.Kvs, "a refused txn changes nothing")
}
