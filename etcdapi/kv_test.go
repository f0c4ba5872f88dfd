package etcdapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func keysOfResp(r *clientv3.GetResponse) []string {
	var out []string
	for _, kv := range r.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// TestKVRange drives Put and Get with every Range option through
// clientv3, against etcd's semantics.
func TestKVRange(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t)
	ctx := tctx(t)

	var revs []int64
	for i, k := range []string{"a/3", "a/1", "a/2", "b/1", "a/1"} {
		r, err := cli.Put(ctx, k, fmt.Sprintf("v%d", i))
		require.NoError(t, err)
		revs = append(revs, r.Header.Revision)
	}
	// a/1 was put twice: version 2, create rev revs[1], mod rev revs[4].
	g, err := cli.Get(ctx, "a/1")
	require.NoError(t, err)
	require.Len(t, g.Kvs, 1)
	assert.Equal(t, "v4", string(g.Kvs[0].Value))
	assert.EqualValues(t, 2, g.Kvs[0].Version)
	assert.Equal(t, revs[1], g.Kvs[0].CreateRevision)
	assert.Equal(t, revs[4], g.Kvs[0].ModRevision)
	assert.Equal(t, revs[4], g.Header.Revision)
	assert.NotZero(t, g.Header.MemberId)
	assert.NotZero(t, g.Header.ClusterId)
	assert.NotZero(t, g.Header.RaftTerm)

	g, err = cli.Get(ctx, "missing")
	require.NoError(t, err)
	assert.Empty(t, g.Kvs)
	assert.Zero(t, g.Count)

	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Equal(t, []string{"a/1", "a/2", "a/3"}, keysOfResp(g))
	assert.EqualValues(t, 3, g.Count)
	assert.False(t, g.More)

	g, err = cli.Get(ctx, "a/2", clientv3.WithFromKey())
	require.NoError(t, err)
	assert.Equal(t, []string{"a/2", "a/3", "b/1"}, keysOfResp(g))

	g, err = cli.Get(ctx, "a/2", clientv3.WithRange("b/1"))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/2", "a/3"}, keysOfResp(g))

	g, err = cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithLimit(2))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/1", "a/2"}, keysOfResp(g))
	assert.True(t, g.More)
	assert.EqualValues(t, 4, g.Count)

	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	require.Len(t, g.Kvs, 3)
	assert.Empty(t, g.Kvs[0].Value)

	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Empty(t, g.Kvs)
	assert.EqualValues(t, 3, g.Count)

	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/3", "a/2", "a/1"}, keysOfResp(g))

	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/3", "a/2", "a/1"}, keysOfResp(g))

	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/2"}, keysOfResp(g))
	assert.True(t, g.More)

	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/1", "a/2", "a/3"}, keysOfResp(g))

	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByVersion, clientv3.SortDescend))
	require.NoError(t, err)
	assert.Equal(t, "a/1", keysOfResp(g)[0])

	g, err = cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithMinModRev(revs[2]), clientv3.WithMaxModRev(revs[3]))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/2", "b/1"}, keysOfResp(g))
	g, err = cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithMinCreateRev(revs[1]), clientv3.WithMaxCreateRev(revs[2]))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/1", "a/2"}, keysOfResp(g))

	g, err = cli.Get(ctx, "a/1", clientv3.WithSerializable())
	require.NoError(t, err)
	require.Len(t, g.Kvs, 1)

	// Reads at a past revision: the state as it was.
	g, err = cli.Get(ctx, "a/", clientv3.WithPrefix(), clientv3.WithRev(revs[1]))
	require.NoError(t, err)
	assert.Equal(t, []string{"a/1", "a/3"}, keysOfResp(g))
	assert.Equal(t, "v1", string(g.Kvs[0].Value))
	assert.Equal(t, revs[4], g.Header.Revision)
	g, err = cli.Get(ctx, "a/1", clientv3.WithRev(revs[3]))
	require.NoError(t, err)
	require.Len(t, g.Kvs, 1)
	assert.Equal(t, "v1", string(g.Kvs[0].Value))
	assert.EqualValues(t, 1, g.Kvs[0].Version)

	_, err = cli.Get(ctx, "a/1", clientv3.WithRev(revs[4]+1000))
	require.ErrorIs(t, err, rpctypes.ErrFutureRev)

	// Put's prev_kv, ignore_value.
	p, err := cli.Put(ctx, "a/2", "new", clientv3.WithPrevKV())
	require.NoError(t, err)
	require.NotNil(t, p.PrevKv)
	assert.Equal(t, "v2", string(p.PrevKv.Value))
	_, err = cli.Put(ctx, "a/2", "", clientv3.WithIgnoreValue())
	require.NoError(t, err)
	g, err = cli.Get(ctx, "a/2")
	require.NoError(t, err)
	assert.Equal(t, "new", string(g.Kvs[0].Value))
	assert.EqualValues(t, 3, g.Kvs[0].Version)
	_, err = cli.Put(ctx, "nope", "", clientv3.WithIgnoreValue())
	require.ErrorIs(t, err, rpctypes.ErrKeyNotFound)

	// Delete: one key, a prefix with prev_kv, a range.
	d, err := cli.Delete(ctx, "a/3")
	require.NoError(t, err)
	assert.EqualValues(t, 1, d.Deleted)
	d, err = cli.Delete(ctx, "a/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	require.NoError(t, err)
	assert.EqualValues(t, 2, d.Deleted)
	require.Len(t, d.PrevKvs, 2)
	assert.Equal(t, "a/1", string(d.PrevKvs[0].Key))
	for _, k := range []string{"r/1", "r/2", "r/3"} {
		_, err := cli.Put(ctx, k, "x")
		require.NoError(t, err)
	}
	d, err = cli.Delete(ctx, "r/1", clientv3.WithRange("r/3"))
	require.NoError(t, err)
	assert.EqualValues(t, 2, d.Deleted)
	g, err = cli.Get(ctx, "r/", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Equal(t, []string{"r/3"}, keysOfResp(g))

	_, err = cli.Put(ctx, "", "x")
	require.ErrorIs(t, err, rpctypes.ErrEmptyKey)
}

// TestKVTxn runs etcd transactions: every compare target and result,
// the three op kinds, and etcd's refusals.
func TestKVTxn(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t)
	ctx := tctx(t)

	p, err := cli.Put(ctx, "k", "v1")
	require.NoError(t, err)
	rev := p.Header.Revision

	cases := []struct {
		cmp  clientv3.Cmp
		want bool
	}{
		{clientv3.Compare(clientv3.Value("k"), "=", "v1"), true},
		{clientv3.Compare(clientv3.Value("k"), "!=", "v1"), false},
		{clientv3.Compare(clientv3.Value("k"), "<", "v2"), true},
		{clientv3.Compare(clientv3.Value("k"), ">", "v2"), false},
		{clientv3.Compare(clientv3.Version("k"), "=", 1), true},
		{clientv3.Compare(clientv3.Version("k"), ">", 1), false},
		{clientv3.Compare(clientv3.CreateRevision("k"), "=", rev), true},
		{clientv3.Compare(clientv3.ModRevision("k"), "<", rev+1), true},
		{clientv3.Compare(clientv3.ModRevision("k"), "!=", rev), false},
		{clientv3.Compare(clientv3.Version("absent"), "=", 0), true},
		{clientv3.Compare(clientv3.CreateRevision("absent"), "=", 0), true},
	}
	for i, c := range cases {
		r, err := cli.Txn(ctx).If(c.cmp).Commit()
		require.NoError(t, err, "case %d", i)
		assert.Equal(t, c.want, r.Succeeded, "case %d", i)
	}

	r, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value("k"), "=", "v1")).
		Then(clientv3.OpPut("k", "v2", clientv3.WithPrevKV()), clientv3.OpPut("j", "x"), clientv3.OpGet("k"),
			clientv3.OpDelete("gone")).
		Else(clientv3.OpGet("k")).
		Commit()
	require.NoError(t, err)
	require.True(t, r.Succeeded)
	require.Len(t, r.Responses, 4)
	assert.Equal(t, "v1", string(r.Responses[0].GetResponsePut().PrevKv.Value))
	assert.Equal(t, "v2", string(r.Responses[2].GetResponseRange().Kvs[0].Value))
	assert.Zero(t, r.Responses[3].GetResponseDeleteRange().Deleted)

	r, err = cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value("k"), "=", "v1")).
		Then(clientv3.OpPut("k", "v3")).
		Else(clientv3.OpGet("", clientv3.WithPrefix()), clientv3.OpDelete("j", clientv3.WithPrevKV())).
		Commit()
	require.NoError(t, err)
	require.False(t, r.Succeeded)
	assert.Len(t, r.Responses[0].GetResponseRange().Kvs, 2)
	assert.EqualValues(t, 1, r.Responses[1].GetResponseDeleteRange().Deleted)
	assert.Equal(t, "j", string(r.Responses[1].GetResponseDeleteRange().PrevKvs[0].Key))

	_, err = cli.Txn(ctx).Then(clientv3.OpPut("d", "1"), clientv3.OpPut("d", "2")).Commit()
	require.ErrorIs(t, err, rpctypes.ErrDuplicateKey)
	_, err = cli.Txn(ctx).Then(clientv3.OpPut("d/1", "1"), clientv3.OpDelete("d/", clientv3.WithPrefix())).Commit()
	require.ErrorIs(t, err, rpctypes.ErrDuplicateKey)
	var many []clientv3.Op
	for i := range DefaultMaxTxnOps + 1 {
		many = append(many, clientv3.OpPut(fmt.Sprintf("m/%d", i), "x"))
	}
	_, err = cli.Txn(ctx).Then(many...).Commit()
	require.ErrorIs(t, err, rpctypes.ErrTooManyOps)

	g, err := cli.Get(ctx, "d", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Empty(t, g.Kvs, "a refused txn changes nothing")
	var _ = mvccpb.PUT
}

// TestDeleteLargePrefix: a prefix delete without prev_kv reads nothing,
// so a prefix larger than one read may return is deleted whole.
func TestDeleteLargePrefix(t *testing.T) {
	f := newFront(t, []coordtest.Option{coordtest.WithConfig(func(i int, cfg *coord.Config) {
		cfg.MaxReadBytes = 8 << 10
	})})
	cli := f.client(t, f.eps[0])
	ctx := tctx(t)
	val := strings.Repeat("x", 1<<10)
	for i := range 20 {
		_, err := cli.Put(ctx, fmt.Sprintf("big/%02d", i), val)
		require.NoError(t, err)
	}
	_, err := cli.Get(ctx, "big/", clientv3.WithPrefix())
	require.Error(t, err, "the prefix is past one read")
	d, err := cli.Delete(ctx, "big/", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.EqualValues(t, 20, d.Deleted)
}

// TestDeletePrefixOnlyItsKeys: a prefix delete (alone or in a Txn)
// deletes the keys under its prefix and no key that merely shares the
// prefix's leading bytes with it.
func TestDeletePrefixOnlyItsKeys(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t, f.eps[0])
	ctx := tctx(t)
	for _, k := range []string{"ab1", "abc1", "abc2", "b", "x1", "xy1"} {
		_, err := cli.Put(ctx, k, "v")
		require.NoError(t, err)
	}
	d, err := cli.Delete(ctx, "abc", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.EqualValues(t, 2, d.Deleted)
	r, err := cli.Txn(ctx).Then(clientv3.OpDelete("xy", clientv3.WithPrefix())).Commit()
	require.NoError(t, err)
	assert.EqualValues(t, 1, r.Responses[0].GetResponseDeleteRange().Deleted)
	g, err := cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	var keys []string
	for _, kv := range g.Kvs {
		keys = append(keys, string(kv.Key))
	}
	assert.Equal(t, []string{"ab1", "b", "x1"}, keys)
}

// TestTxnLeaseCompare: a compare on a key's lease is coord's SessionOf
// (a lease is its session): equal to the lease it was put with, 0 for a
// key without one or an absent key.
func TestTxnLeaseCompare(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t, f.eps[0])
	ctx := tctx(t)
	l, err := cli.Grant(ctx, 30)
	require.NoError(t, err)
	_, err = cli.Put(ctx, "leased", "v", clientv3.WithLease(l.ID))
	require.NoError(t, err)
	_, err = cli.Put(ctx, "plain", "v")
	require.NoError(t, err)
	for _, tc := range []struct {
		key, op string
		want    clientv3.LeaseID
		holds   bool
	}{
		{"leased", "=", l.ID, true},
		{"leased", "!=", l.ID, false},
		{"leased", "=", 0, false},
		{"leased", ">", 0, true},
		{"plain", "=", 0, true},
		{"plain", "<", l.ID, true},
		{"absent", "=", 0, true},
		{"absent", "=", l.ID, false},
	} {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(tc.key), tc.op, tc.want)).Commit()
		require.NoError(t, err, "%s %s %d", tc.key, tc.op, tc.want)
		assert.Equal(t, tc.holds, r.Succeeded, "%s %s %d", tc.key, tc.op, tc.want)
	}
}

// TestRangeFilterCount: with revision filters, count is every key in the
// range (etcd counts before its filters) and more says the limit left
// some filtered key out; a max revision of 1 and a read at revision 1
// (etcd's empty store) keep no key.
func TestRangeFilterCount(t *testing.T) {
	f := newFront(t, nil)
	cli := f.client(t, f.eps[0])
	ctx := tctx(t)
	var revs []int64
	for i := range 4 {
		p, err := cli.Put(ctx, fmt.Sprintf("f/%d", i), "v")
		require.NoError(t, err)
		revs = append(revs, p.Header.Revision)
	}
	g, err := cli.Get(ctx, "f/", clientv3.WithPrefix(), clientv3.WithMinModRev(revs[1]), clientv3.WithLimit(2))
	require.NoError(t, err)
	assert.EqualValues(t, 4, g.Count)
	assert.Len(t, g.Kvs, 2)
	assert.True(t, g.More, "f/3 passes the filter and is past the limit")
	g, err = cli.Get(ctx, "f/", clientv3.WithPrefix(), clientv3.WithMinModRev(revs[2]), clientv3.WithLimit(2))
	require.NoError(t, err)
	assert.EqualValues(t, 4, g.Count)
	assert.Len(t, g.Kvs, 2)
	assert.False(t, g.More)
	g, err = cli.Get(ctx, "f/", clientv3.WithPrefix(), clientv3.WithMaxModRev(1))
	require.NoError(t, err)
	assert.Empty(t, g.Kvs)
	assert.EqualValues(t, 4, g.Count)
	g, err = cli.Get(ctx, "f/", clientv3.WithPrefix(), clientv3.WithRev(1))
	require.NoError(t, err)
	assert.Empty(t, g.Kvs)
	assert.Zero(t, g.Count)
	assert.Equal(t, revs[3], g.Header.Revision)
}
