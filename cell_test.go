package coord_test

import (
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestCellValidatesOnce: every call through a Cell checks its input on
// the one shared path, before anything is sent: the same sentinel for
// the same bad input, whichever call carries it, and nothing changes.
func TestCellValidatesOnce(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	var cell coord.Cell = c.Node(0)
	long := strings.Repeat("k", 1<<20)
	big := make([]byte, 1<<20)

	_, err := cell.Get(ctx, long)
	require.ErrorIs(t, err, coord.ErrKeyTooLarge)
	_, _, err = cell.List(ctx, long)
	require.ErrorIs(t, err, coord.ErrKeyTooLarge)
	_, err = cell.Put(ctx, long, nil)
	require.ErrorIs(t, err, coord.ErrKeyTooLarge)
	_, err = cell.Put(ctx, "", nil)
	require.ErrorIs(t, err, coord.ErrInvalidKey)
	_, err = cell.Put(ctx, "k", big)
	require.ErrorIs(t, err, coord.ErrValueTooLarge)
	_, err = cell.Delete(ctx, long)
	require.ErrorIs(t, err, coord.ErrKeyTooLarge)
	_, err = cell.Txn(ctx).Then(coord.OpPut("k", big)).Commit()
	require.ErrorIs(t, err, coord.ErrValueTooLarge)
	w := cell.Watch(ctx, long)
	for range w.Events() {
	}
	require.ErrorIs(t, w.Err(), coord.ErrKeyTooLarge)
	w = cell.Watch(ctx, "k", coord.FromRev(-1))
	for range w.Events() {
	}
	require.ErrorIs(t, w.Err(), coord.ErrInvalidArgument)

	_, rev, err := cell.List(ctx, "")
	require.NoError(t, err)
	require.Zero(t, rev, "a refused write changed the cell")
}

// TestOpPutRefusesIfVersion: a condition belongs in If; OpPut given one
// fails the whole transaction at Commit instead of dropping it.
func TestOpPutRefusesIfVersion(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(0)
	_, err := n.Put(ctx, "k", []byte("v1"))
	require.NoError(t, err)

	_, err = n.Txn(ctx).Then(coord.OpPut("k", []byte("v2"), coord.IfVersion(7))).Commit()
	require.ErrorIs(t, err, coord.ErrInvalidArgument)
	_, err = n.Txn(ctx).If(coord.Version("k").Eq(1)).Then(coord.OpGet("k")).
		Else(coord.OpPut("k", []byte("v3"), coord.IfVersion(0))).Commit()
	require.ErrorIs(t, err, coord.ErrInvalidArgument)
	kv, err := n.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v1", string(kv.Value))
	require.Equal(t, int64(1), kv.Version)

	// Ephemeral is the one write option a transaction's put takes.
	s := newSession(t, ctx, n, 2*time.Second)
	res, err := n.Txn(ctx).Then(coord.OpPut("e", nil, coord.Ephemeral(s))).Commit()
	require.NoError(t, err)
	require.Equal(t, s.ID(), res.Results[0].KVs[0].Session)
}

// TestSessionCellAndNode: a session made by a member knows it both as its
// Node and as its Cell, and its recipes work through either.
func TestSessionCellAndNode(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(1)
	s := newSession(t, ctx, n, 2*time.Second)
	require.Same(t, n, s.Node())
	require.Equal(t, coord.Cell(n), s.Cell())
	m := coord.NewMutex(s, "lock")
	tok, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Cell().CheckToken(ctx, "lock", tok))
	require.NoError(t, m.Unlock(ctx))
	require.ErrorIs(t, s.Cell().CheckToken(ctx, "lock", tok), coord.ErrStaleToken)
}
