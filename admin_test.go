package coord_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestAdminGossipKeyring rotates the gossip key of a gossiping member
// through its Admin handle (add, use, remove the old) and sees the
// keyring's view follow; a member that does not gossip has no keyring.
func TestAdminGossipKeyring(t *testing.T) {
	t.Parallel()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	c := coordtest.NewCluster(t, 1, coordtest.WithGossip(), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		cfg.Gossip.Keys = [][]byte{k1}
	}))
	kr, err := c.Node(0).Admin().GossipKeyring()
	require.NoError(t, err)
	require.Equal(t, k1, kr.PrimaryKey())
	require.NoError(t, kr.AddKey(k2))
	require.NoError(t, kr.UseKey(k2))
	require.NoError(t, kr.RemoveKey(k1))
	require.Equal(t, [][]byte{k2}, kr.Keys())
	require.Equal(t, k2, kr.PrimaryKey())
	require.Error(t, kr.RemoveKey(k2), "the primary key cannot be removed")

	// A second handle reaches the same keyring; the deprecated GetKeys
	// still answers.
	old, err := c.Node(0).Admin().GossipKeyring()
	require.NoError(t, err)
	require.Equal(t, [][]byte{k2}, old.GetKeys())

	plain := coordtest.NewCluster(t, 1)
	_, err = plain.Node(0).Admin().GossipKeyring()
	require.Error(t, err)
}

// TestAdminMoveLeader: MoveLeader hands leadership to the voter named,
// asked of the leader or of a follower, and the cell writes on; an
// unknown name is ErrUnknownMember, the leader itself a no-op.
func TestAdminMoveLeader(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	for round := range 3 {
		lead := c.LeaderIndex()
		from := (lead + 1 + round%2) % 3 // a follower, then the leader, in turn
		if round == 1 {
			from = lead
		}
		to := (lead + 1) % 3
		if to == from {
			to = (lead + 2) % 3
		}
		name := c.Node(to).Status().Name
		require.NoError(t, c.Node(from).Admin().MoveLeader(ctx, name), "round %d (seed %d)", round, c.Seed())
		require.Equal(t, name, c.Node(from).Status().Leader, "round %d: the caller sees it lead", round)
		_, err := c.Node(from).Put(ctx, "after-move", []byte{byte(round)})
		require.NoError(t, err, "round %d", round)
	}
	lead := c.Leader()
	require.NoError(t, lead.Admin().MoveLeader(ctx, lead.Status().Name), "the leader itself")
	require.ErrorIs(t, lead.Admin().MoveLeader(ctx, "nobody"), coord.ErrUnknownMember)
	require.ErrorIs(t, c.Node((c.LeaderIndex()+1)%3).Admin().MoveLeader(ctx, "nobody"), coord.ErrUnknownMember)
}
