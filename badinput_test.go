package coord_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(i int, cfg *coord.Config) {
		cfg.MaxKeySize = 32
		cfg.MaxValueSize = 100
		cfg.MaxTxnOps = 4
	}))
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(0)
	before, err := n.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)

	_, err = n.Put(ctx, string(bytes.Repeat([]byte("k"), 33)), []byte("v"))
	require.ErrorIs(t, err, coord.ErrKeyTooLarge)
	_, err = n.Put(ctx, "k", make([]byte, 101))
	require.ErrorIs(t, err, coord.ErrValueTooLarge)
	_, err = n.Put(ctx, "", []byte("v"))
	require.ErrorIs(t, err, coord.ErrInvalidKey)
	_, err = n.Get(ctx, "")
	require.ErrorIs(t, err, coord.ErrInvalidKey)
	_, err = n.Txn(ctx).Then(coord.OpPut("a", nil), coord.OpPut("b", nil), coord.OpPut("c", nil), coord.OpPut("d", nil), coord.OpPut("e", nil)).Commit()
	require.ErrorIs(t, err, coord.ErrTooManyOps)
	_, err = n.Txn(ctx).Then(coord.OpPut("a", make([]byte, 101))).Commit()
	require.ErrorIs(t, err, coord.ErrValueTooLarge)

	after, err := n.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, before.ModRev, n.Status().Revision, "no refused request moved the revision")
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		_, err := n.Get(ctx, k)
		require.ErrorIs(t, err, coord.ErrNotFound)
	}
}

func TestQuotaRefusesGrowthButAllowsDeletes(t *testing.T) {
	c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(i int, cfg *coord.Config) {
		cfg.QuotaBytes = 4 << 10
	}))
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(1)
	value := make([]byte, 1000)
	var stored []string
	var err error
	for i := 0; ; i++ {
		key := fmt.Sprintf("big/%d", i)
		_, err = n.Put(ctx, key, value)
		if err != nil {
			break
		}
		stored = append(stored, key)
		require.Less(t, i, 10, "quota never enforced")
	}
	require.ErrorIs(t, err, coord.ErrQuotaExceeded)
	require.NotEmpty(t, stored)
	kvs, _, err := c.Node(2).List(ctx, "big/")
	require.NoError(t, err)
	require.Len(t, kvs, len(stored), "the refused write changed nothing")

	// A put that shrinks a key still works at the quota; deletes always do.
	_, err = n.Put(ctx, stored[0], []byte("small"))
	require.NoError(t, err)
	_, err = n.Delete(ctx, stored[1])
	require.NoError(t, err)
	_, err = n.Put(ctx, "big/again", value)
	require.NoError(t, err, "room made by the delete can be used")
}

func TestOpenRejectsBadConfig(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]coord.Config{
		"no name":            {},
		"self not in peers":  {Name: "a", Peers: []coord.Peer{{Name: "b", Addr: "127.0.0.1:1"}}},
		"duplicate peer":     {Name: "a", Peers: []coord.Peer{{Name: "a", Addr: "x"}, {Name: "a", Addr: "y"}}},
		"no address":         {Name: "a"},
		"election too short": {Name: "a", Addr: "127.0.0.1:0", ElectionTicks: 1, HeartbeatTicks: 1},
	} {
		_, err := coord.Open(ctx, cfg)
		require.ErrorIs(t, err, coord.ErrInvalidConfig, name)
	}
}
