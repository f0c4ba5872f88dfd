package coord_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
)

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	ctx := context.Background()
	for name, cfg := range map[string]coord.Config{
		"no name":                {},
		"self not in peers":      {Name: "a", Peers: []coord.Peer{{Name: "b", Addr: "127.0.0.1:1"}}},
		"duplicate peer":         {Name: "a", Peers: []coord.Peer{{Name: "a", Addr: "x"}, {Name: "a", Addr: "y"}}},
		"no address":             {Name: "a"},
		"election too short":     {Name: "a", Addr: "127.0.0.1:0", ElectionTicks: 1, HeartbeatTicks: 1},
		"duplicate address":      {Name: "a", Peers: []coord.Peer{{Name: "a", Addr: "127.0.0.1:7001"}, {Name: "b", Addr: "127.0.0.1:7001"}}},
		"unparsable address":     {Name: "a", Peers: []coord.Peer{{Name: "a", Addr: "127.0.0.1:7001"}, {Name: "b", Addr: "nowhere"}}},
		"port out of range":      {Name: "a", Addr: "127.0.0.1:70000"},
		"addr is not self":       {Name: "a", Addr: "127.0.0.1:7002", Peers: []coord.Peer{{Name: "a", Addr: "127.0.0.1:7001"}}},
		"tick in nanoseconds":    {Name: "a", Addr: "127.0.0.1:0", TickInterval: 100},
		"txn cannot fit a frame": {Name: "a", Addr: "127.0.0.1:0", MaxValueSize: 1 << 20, MaxTxnOps: 128},
		"frame too small":        {Name: "a", Addr: "127.0.0.1:0", MaxFrameSize: 1 << 10},
		"short secret":           {Name: "a", Addr: "127.0.0.1:0", Secret: []byte("password")},
		"secret and tls":         {Name: "a", Addr: "127.0.0.1:0", Secret: make([]byte, 32), TLS: &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}},
		"tls not mutual":         {Name: "a", Addr: "127.0.0.1:0", TLS: &tls.Config{}},
		"join with nobody":       {Name: "a", Addr: "127.0.0.1:0", Join: true},
	} {
		_, err := coord.Open(ctx, cfg)
		require.ErrorIs(t, err, coord.ErrInvalidConfig, name)
	}
}

// Every error from Open wraps a sentinel: a port in use is ErrListen.
func TestOpenErrorsWrapSentinels(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = coord.Open(context.Background(), coord.Config{Name: "a", Addr: l.Addr().String()})
	require.ErrorIs(t, err, coord.ErrListen)
	require.ErrorIs(t, err, syscall.EADDRINUSE)
}

// Requests that could never work are refused before they start, and a
// closed member answers ErrClosed, serializable reads included.
func TestBadRequestsAndClosedMember(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	ctx := ctxT(t, 20*time.Second)
	n := c.Node(0)
	w := n.Watch(ctx, "k", coord.FromRev(-5))
	for range w.Events() {
	}
	require.ErrorIs(t, w.Err(), coord.ErrInvalidArgument)
	require.ErrorIs(t, n.Admin().AddLearner(ctx, "d", ""), coord.ErrInvalidConfig)
	_, err := n.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	require.NoError(t, n.Close())
	_, err = n.Get(ctx, "k", coord.Serializable())
	require.ErrorIs(t, err, coord.ErrClosed)
	_, _, err = n.List(ctx, "", coord.Serializable())
	require.ErrorIs(t, err, coord.ErrClosed)
}

// A member that joined restarts without Join: its data directory knows
// its cell, and its peer list need not name it.
func TestJoinedMemberRestartsWithoutJoin(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 30*time.Second)
	network := transport.NewNetwork(1)
	defer network.Close()
	fast := func(cfg coord.Config) coord.Config {
		cfg.TickInterval, cfg.ElectionTicks, cfg.HeartbeatTicks = 10*time.Millisecond, 20, 2
		return cfg
	}
	a, err := coord.Open(ctx, fast(coord.Config{Name: "a", Transport: network.Join("a"), Peers: []coord.Peer{{Name: "a", Addr: "a"}}}))
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Put(ctx, "k", []byte("1"))
	require.NoError(t, err)
	require.NoError(t, a.Admin().AddLearner(ctx, "b", "b"))
	disk := storage.NewMemDisk()
	b, err := coord.Open(ctx, fast(coord.Config{Name: "b", Transport: network.Join("b"), Disk: disk, Join: true,
		Peers: []coord.Peer{{Name: "a", Addr: "a"}}}))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		kv, err := b.Get(ctx, "k", coord.Serializable())
		return err == nil && string(kv.Value) == "1"
	}, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, b.Close())
	_, err = a.Put(ctx, "k", []byte("2"))
	require.NoError(t, err)
	b, err = coord.Open(ctx, fast(coord.Config{Name: "b", Transport: network.Join("b"), Disk: disk,
		Peers: []coord.Peer{{Name: "a", Addr: "a"}}}))
	require.NoError(t, err)
	defer b.Close()
	require.Eventually(t, func() bool {
		kv, err := b.Get(ctx, "k", coord.Serializable())
		return err == nil && string(kv.Value) == "2"
	}, 20*time.Second, 10*time.Millisecond)
}
