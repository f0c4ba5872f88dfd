package coord_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/stretchr/testify/require"
)

// freeAddr returns a loopback address nothing listens on (a port the
// kernel gave and took back).
func freeAddr(t *testing.T) string {
	t.Helper()
	return loopbackAddrs(t, 1)[0]
}

// loopbackAddrs draws n free loopback TCP addresses. Every listener stays
// open until all n are drawn: one closed at once could be drawn again for
// the next (a cell failed to open: peers "m0" and "m2" had the same
// address).
func loopbackAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	var addrs []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(tb, err)
		held = append(held, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

func addrsOf(t *testing.T, ctx context.Context, n *coord.Node) map[string]string {
	t.Helper()
	ms, err := n.Admin().Members(ctx)
	require.NoError(t, err)
	out := map[string]string{}
	for _, m := range ms {
		out[m.Name] = m.Addr
	}
	return out
}

// TestUpdateMemberMovesAPeerOverTCP: a member of a three-member cell over
// TCP moves to a new address: it stops, UpdateMember records the
// address, it starts again from its data directory listening there, and
// the others reach it there: with a third member gone, every commit needs
// it. Bad input is refused and changes nothing.
func TestUpdateMemberMovesAPeerOverTCP(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	var peers []coord.Peer
	for i, addr := range loopbackAddrs(t, 3) {
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: addr})
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	open := func(i int, addr string) *coord.Node {
		// A member started again on a new address says so in its own
		// Peers entry too (Open checks they agree); the others' Peers,
		// read only to found the cell, need not change.
		own := append([]coord.Peer(nil), peers...)
		own[i].Addr = addr
		n, err := coord.Open(ctx, coord.Config{
			Name: peers[i].Name, Addr: addr, Peers: own, DataDir: dirs[i],
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
		})
		require.NoError(t, err)
		return n
	}
	nodes := make([]*coord.Node, 3)
	for i, p := range peers {
		nodes[i] = open(i, p.Addr)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	})
	_, err := nodes[0].Put(ctx, "before", []byte("x"))
	require.NoError(t, err)

	const mover = 2
	name := peers[mover].Name
	admin := nodes[0].Admin()
	before := addrsOf(t, ctx, nodes[0])
	require.ErrorIs(t, admin.UpdateMember(ctx, "nobody", freeAddr(t)), coord.ErrUnknownMember)
	for _, bad := range []string{"", "no-port", "127.0.0.1:http", "127.0.0.1:70000", "10.0.0.1:1 2"} {
		require.ErrorIs(t, admin.UpdateMember(ctx, name, bad), coord.ErrInvalidConfig, "%q", bad)
	}
	require.ErrorIs(t, admin.UpdateMember(ctx, name, peers[0].Addr), coord.ErrMemberExists, "another member's address")
	require.Equal(t, before, addrsOf(t, ctx, nodes[1]), "refused changes changed nothing")

	// The move: stop, record the new address, start there.
	require.NoError(t, nodes[mover].Close())
	nodes[mover] = nil
	moved := freeAddr(t)
	require.NoError(t, admin.UpdateMember(ctx, name, moved))
	want := map[string]string{peers[0].Name: peers[0].Addr, peers[1].Name: peers[1].Addr, name: moved}
	require.Equal(t, want, addrsOf(t, ctx, nodes[1]))
	nodes[mover] = open(mover, moved)
	require.NoError(t, nodes[mover].Ready(ctx))
	require.Equal(t, want, addrsOf(t, ctx, nodes[mover]), "the moved member's own book")
	_, err = nodes[mover].Put(ctx, "through-the-mover", []byte("y"))
	require.NoError(t, err)

	// With m0 gone, m1 and the moved member are the quorum: every commit
	// needs the moved member's vote, over its new address.
	require.NoError(t, nodes[0].Close())
	nodes[0] = nil
	for i := range 5 {
		_, err = nodes[1].Put(ctx, fmt.Sprintf("after/%d", i), []byte("z"))
		require.NoError(t, err)
	}
	kv, err := nodes[mover].Get(ctx, "after/4")
	require.NoError(t, err)
	require.Equal(t, "z", string(kv.Value))
}
