package coord_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// serveCluster is a cell whose members serve clients on loopback ports,
// and rawClients speaking clientwire directly, as a hostile client would.
func serveCluster(t *testing.T, n int, cfg func(i int, c *coord.Config)) *coordtest.Cluster {
	return coordtest.NewCluster(t, n, coordtest.WithConfig(func(i int, c *coord.Config) {
		c.ClientAddr = "127.0.0.1:0"
		if cfg != nil {
			cfg(i, c)
		}
	}))
}

type rawClient struct {
	*clientwire.ClientConn
	mu   sync.Mutex
	acks map[uint64]*clientwire.KeepAliveAck
	got  chan struct{}
}

func dialRaw(t *testing.T, ctx context.Context, addr, name string) (*rawClient, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	rc := &rawClient{acks: map[uint64]*clientwire.KeepAliveAck{}, got: make(chan struct{}, 1)}
	cc, err := clientwire.Handshake(ctx, conn, clientwire.ClientOptions{Name: name, OnKeepAliveAck: func(a *clientwire.KeepAliveAck) {
		rc.mu.Lock()
		rc.acks[a.Seq] = a
		rc.mu.Unlock()
		select {
		case rc.got <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		conn.Close()
		return nil, err
	}
	rc.ClientConn = cc
	t.Cleanup(func() { cc.Close() })
	return rc, nil
}

func (rc *rawClient) propose(t *testing.T, ctx context.Context, c *command.Command) (command.Result, error) {
	t.Helper()
	b, err := command.Encode(c)
	require.NoError(t, err)
	res, err := rc.Propose(ctx, b)
	if err != nil {
		return command.Result{}, err
	}
	return res.Result, nil
}

func (rc *rawClient) newSession(t *testing.T, ctx context.Context, ttl time.Duration) int64 {
	t.Helper()
	res, err := rc.propose(t, ctx, &command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: int64(ttl)}})
	require.NoError(t, err)
	require.NotZero(t, res.SessionID)
	return res.SessionID
}

// keepAlive sends a keep-alive and waits for its ack.
func (rc *rawClient) keepAlive(t *testing.T, ctx context.Context, seq uint64, ids ...int64) *clientwire.KeepAliveAck {
	t.Helper()
	require.NoError(t, rc.KeepAlive(&clientwire.KeepAlive{Seq: seq, SessionIDs: ids}))
	for {
		rc.mu.Lock()
		a := rc.acks[seq]
		rc.mu.Unlock()
		if a != nil {
			return a
		}
		select {
		case <-rc.got:
		case <-ctx.Done():
			t.Fatalf("no ack for keep-alive %d: %v", seq, ctx.Err())
		}
	}
}

func putCmd(key, value string, session int64) *command.Command {
	return &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{
		{Type: command.OpPut, Key: key, Value: []byte(value), Session: session}}}}
}

// wireCode is the code of a member's error answer, 0 for another error.
func wireCode(err error) clientwire.Code {
	var we *clientwire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

func TestServeClientsProposeReadWatchKeepAlive(t *testing.T) {
	c := serveCluster(t, 3, nil)
	ctx := ctxT(t, 20*time.Second)
	n := c.Node(1)
	require.NotEmpty(t, n.ClientAddr())
	rc, err := dialRaw(t, ctx, n.ClientAddr(), "w1")
	require.NoError(t, err)
	w := rc.Welcome()
	require.Equal(t, c.Name(1), w.Member)
	require.Equal(t, n.MinSessionTTL(), w.MinSessionTTL)
	require.NotZero(t, w.CellID)

	watch, err := rc.Watch(ctx, &clientwire.WatchStart{WatchID: 1, Prefix: "k/"})
	require.NoError(t, err)
	sid := rc.newSession(t, ctx, n.MinSessionTTL())
	res, err := rc.propose(t, ctx, putCmd("k/a", "1", sid))
	require.NoError(t, err)
	require.True(t, res.Succeeded)

	rr, err := rc.Read(ctx, &clientwire.Read{Key: "k/a"})
	require.NoError(t, err)
	require.Len(t, rr.KVs, 1)
	require.Equal(t, "1", string(rr.KVs[0].Value))
	require.Equal(t, sid, rr.KVs[0].Session)
	require.GreaterOrEqual(t, rr.Rev, rr.KVs[0].ModRev)
	kv, err := c.Node(0).Get(ctx, "k/a")
	require.NoError(t, err)
	require.Equal(t, sid, int64(kv.Session))

	select {
	case m := <-watch.Events():
		ev := m.(*clientwire.WatchEvents)
		require.Equal(t, "k/a", ev.Events[0].KV.Key)
		require.True(t, ev.Events[len(ev.Events)-1].EndOfRev)
	case <-ctx.Done():
		t.Fatal("no watch event")
	}

	a := rc.keepAlive(t, ctx, 1, sid)
	require.Equal(t, []int64{sid}, a.Confirmed)
	require.Empty(t, a.Gone)

	// Ending it through the member ends it in the cell.
	_, err = rc.propose(t, ctx, &command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: sid}})
	require.NoError(t, err)
	_, err = c.Node(0).Get(ctx, "k/a")
	require.ErrorIs(t, err, coord.ErrNotFound)
	a = rc.keepAlive(t, ctx, 2, sid)
	require.Equal(t, []clientwire.Gone{{ID: sid, Code: clientwire.CodeSessionExpired}}, a.Gone)
}
