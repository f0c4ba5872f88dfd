package coord_test

import (
	"bytes"
	"testing"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestAdminGossipKeyring rotates the gossip key of a gossiping member
// through its Admin handle (add, use, remove the old) and sees the
// keyring's view follow; a member that does not gossip has no keyring.
func TestAdminGossipKeyring(t *testing.T) {
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
