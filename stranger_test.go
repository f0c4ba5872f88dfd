package coord_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/stretchr/testify/require"
)

// TestMissedAdditionCatchesUpOverTCP (issue 25): a member down while
// another is added does not know the new member when it comes back. If
// the new one leads, it must still catch up: it admits the leader's
// appends provisionally and answers at the address the leader sends
// ahead, which the TCP transport dials verifying the certificate names
// that member (the cell's Secret). A write through it then succeeds.
func TestMissedAdditionCatchesUpOverTCP(t *testing.T) {
	secret := bytes.Repeat([]byte{9}, 32)
	addrs := make([]string, 4)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs[i] = l.Addr().String()
		l.Close()
	}
	var peers []coord.Peer
	for i := range 3 {
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: addrs[i]})
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := make([]*coord.Node, 4)
	open := func(i int, join bool) {
		t.Helper()
		n, err := coord.Open(context.Background(), coord.Config{
			Name: fmt.Sprintf("m%d", i), Addr: addrs[i], DataDir: dirs[i], Peers: peers, Join: join, Secret: secret,
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
		})
		require.NoError(t, err)
		nodes[i] = n
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	})
	for i := range 3 {
		open(i, false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put := func(n *coord.Node, key string) error {
		for {
			_, err := n.Put(ctx, key, []byte("v"))
			if !errors.Is(err, coord.ErrNoQuorum) || ctx.Err() != nil {
				return err
			}
		}
	}
	require.NoError(t, put(nodes[0], "before"))

	// m2 is down while m3 is added, promoted and made leader.
	require.NoError(t, nodes[2].Close())
	nodes[2] = nil
	var via *coord.Node
	require.Eventually(t, func() bool {
		for _, n := range nodes[:2] {
			if err := n.Admin().AddLearner(ctx, "m3", addrs[3]); err == nil || errors.Is(err, coord.ErrMemberExists) {
				via = n
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond)
	open(3, true)
	require.Eventually(t, func() bool { return via.Admin().Promote(ctx, "m3") == nil }, 20*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		_ = via.Admin().MoveLeader(ctx, "m3")
		return nodes[3].Status().Role == coord.RoleLeader
	}, 20*time.Second, 50*time.Millisecond, "m3 leads")
	require.NoError(t, put(nodes[3], "while m2 was down"))

	// m2 comes back knowing m0..m2 only, and m3 still leads.
	open(2, false)
	require.Eventually(t, func() bool {
		st := nodes[2].Status()
		return slices.Contains(st.Members, "m3") && st.Leader == "m3"
	}, 20*time.Second, 20*time.Millisecond, "m2 catches up from m3 and learns of it")
	require.Equal(t, coord.RoleLeader, nodes[3].Status().Role)
	require.NoError(t, put(nodes[2], "after"))
	kv, err := nodes[2].Get(ctx, "while m2 was down")
	require.NoError(t, err)
	require.Equal(t, "v", string(kv.Value))
}
