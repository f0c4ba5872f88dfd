package coord_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	t.Parallel()
	c := serveCluster(t, 3, nil)
	ctx := ctxT(t, 20*time.Second)
	n := c.Node(1)
	require.NotEmpty(t, n.Admin().ClientAddr())
	rc, err := dialRaw(t, ctx, n.Admin().ClientAddr(), "w1")
	require.NoError(t, err)
	w := rc.Welcome()
	require.Equal(t, c.Name(1), w.Member)
	require.Equal(t, n.MinSessionTTL(), w.MinSessionTTL)
	require.NotZero(t, w.CellID)

	frames := make(chan clientwire.Message, 16)
	_, err = rc.Watch(ctx, &clientwire.WatchStart{WatchID: 1, Prefix: "k/"}, func(m clientwire.Message) bool {
		select {
		case frames <- m:
			return true
		default:
			return false
		}
	})
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
	case m := <-frames:
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

// TestServeClientsTrust: a client can only propose transactions and its
// own sessions' commands; another client's sessions are refused for
// ephemeral writes, ends and keep-alives, and nothing changes.
func TestServeClientsTrust(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 3, nil)
	ctx := ctxT(t, 20*time.Second)
	a, err := dialRaw(t, ctx, c.Node(0).Admin().ClientAddr(), "alice")
	require.NoError(t, err)
	// A plaintext client naming a member is still only a client.
	b, err := dialRaw(t, ctx, c.Node(1).Admin().ClientAddr(), c.Name(0))
	require.NoError(t, err)
	sid := a.newSession(t, ctx, c.Node(0).MinSessionTTL())
	_, err = a.propose(t, ctx, putCmd("own", "a", sid))
	require.NoError(t, err)
	// A linearizable read first: member 1 has then applied the put, so
	// its revision below is the cell's.
	_, err = c.Node(1).Get(ctx, "own")
	require.NoError(t, err)
	rev := c.Node(1).Status().Revision

	for name, cmd := range map[string]*command.Command{
		"noop":         {Kind: command.KindNoop},
		"seen":         {Kind: command.KindSessionSeen, Session: &command.Session{IDs: []int64{sid}}},
		"credit":       {Kind: command.KindSessionCredit, Session: &command.Session{Credits: []command.Credit{{ID: sid, Nanos: 1e12}}}},
		"expiry":       {Kind: command.KindSessionEnd, Session: &command.Session{ID: sid, Expired: true, Term: 1}},
		"other's end":  {Kind: command.KindSessionEnd, Session: &command.Session{ID: sid}},
		"other's put":  putCmd("stolen", "b", sid),
		"other's else": {Kind: command.KindTxn, Txn: &command.Txn{Else: []command.Op{{Type: command.OpPut, Key: "x", Session: sid}}}},
	} {
		_, err := b.propose(t, ctx, cmd)
		require.Equal(t, clientwire.CodeForbidden, wireCode(err), "%s: %v", name, err)
	}
	ka := b.keepAlive(t, ctx, 1, sid)
	require.Empty(t, ka.Confirmed)
	require.Equal(t, []clientwire.Gone{{ID: sid, Code: clientwire.CodeForbidden}}, ka.Gone)

	_, err = c.Node(1).Get(ctx, "stolen")
	require.ErrorIs(t, err, coord.ErrNotFound)
	require.Equal(t, rev, c.Node(1).Status().Revision, "a refused command writes nothing")
	// The owner's session lives on, and its owner may still use it,
	// through any member (the owner is in the replicated state).
	a2, err := dialRaw(t, ctx, c.Node(2).Admin().ClientAddr(), "alice")
	require.NoError(t, err)
	require.Equal(t, []int64{sid}, a2.keepAlive(t, ctx, 1, sid).Confirmed)
	_, err = a2.propose(t, ctx, putCmd("own2", "a", sid))
	require.NoError(t, err)
}

// TestServeClientsKeepAliveFolding: 1,000 sessions over 10 clients cost
// their member its normal number of keep-alive messages to the leader:
// one per interval, not one per client or per session.
func TestServeClientsKeepAliveFolding(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 3, nil)
	ctx := ctxT(t, 60*time.Second)
	lead := c.LeaderIndex()
	m := c.Node((lead + 1) % 3)
	// A TTL long enough for the thousand creations on a busy machine.
	ttl := 8 * m.MinSessionTTL()
	interval := ttl / 4 // sessions.KeepAliveDivisor
	clients := make([]*rawClient, 10)
	ids := make([][]int64, 10)
	var wg sync.WaitGroup
	for i := range clients {
		rc, err := dialRaw(t, ctx, m.Admin().ClientAddr(), "w"+string(rune('a'+i)))
		require.NoError(t, err)
		clients[i] = rc
		wg.Go(func() {
			for k := range 100 {
				ids[i] = append(ids[i], rc.newSession(t, ctx, ttl))
				if k%20 == 19 {
					// Creating a thousand takes longer than a TTL under
					// the race detector on a busy machine.
					rc.keepAlive(t, ctx, uint64(1000+k), ids[i]...)
				}
			}
		})
	}
	wg.Wait()
	// One round to make every session known to the member.
	round := func(seq uint64) {
		for i, rc := range clients {
			wg.Go(func() {
				a := rc.keepAlive(t, ctx, seq, ids[i]...)
				if len(a.Confirmed) != 100 {
					t.Errorf("client %d round %d: %d confirmed, %d gone", i, seq, len(a.Confirmed), len(a.Gone))
				}
			})
		}
		wg.Wait()
	}
	round(1)
	before := coord.KeepAliveBatches(m)
	start := time.Now()
	const rounds = 6
	for r := range rounds {
		round(uint64(r + 2))
	}
	sent := coord.KeepAliveBatches(m) - before
	intervals := float64(time.Since(start)) / float64(interval)
	t.Logf("%d batches over %.1f intervals for 10 clients × 100 sessions", sent, intervals)
	// Each round waits for a batch; a round's ten keep-alives share it
	// (or the next, for one that arrives just after it left; on a machine
	// with no core to spare, at times the one after: 17 of 6 rounds seen
	// beside two CPU burners). One a client would be 60.
	require.LessOrEqual(t, sent, uint64(3*rounds+2), "one member message per interval, not per client")
}

// rawFrames is a connection that has said Hello and read the Welcome,
// and then writes whatever frames a test likes.
func rawFrames(t *testing.T, addr, name string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	hello, err := clientwire.AppendFrame(nil, 0, 0, &clientwire.Hello{MinVersion: clientwire.MinVersion,
		MaxVersion: clientwire.MaxVersion, Name: name, MaxFrame: clientwire.DefaultMaxFrame}, 4096)
	require.NoError(t, err)
	_, err = conn.Write(hello)
	require.NoError(t, err)
	kind, _, _ := readRawFrame(t, conn)
	require.Equal(t, clientwire.KindWelcome, kind)
	return conn
}

func readRawFrame(t *testing.T, conn net.Conn) (clientwire.Kind, uint64, clientwire.Message) {
	t.Helper()
	var hdr [14]byte
	_, err := io.ReadFull(conn, hdr[:])
	require.NoError(t, err)
	n := binary.BigEndian.Uint32(hdr[:4])
	require.LessOrEqual(t, n, uint32(1<<20))
	body := make([]byte, n-10)
	_, err = io.ReadFull(conn, body)
	require.NoError(t, err)
	kind := clientwire.Kind(hdr[5])
	m, err := clientwire.DecodeMessage(kind, body)
	require.NoError(t, err)
	return kind, binary.BigEndian.Uint64(hdr[6:14]), m
}

// TestServeClientsLimits: a flood of requests is answered
// TooManyRequests while another client is served; bad frames close only
// their connection; one client more than MaxClients is refused cleanly.
func TestServeClientsLimits(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) {
		cfg.MaxClients = 3
		cfg.ClientMaxInFlight = 2
	})
	ctx := ctxT(t, 20*time.Second)
	addr := c.Node(0).Admin().ClientAddr()
	good, err := dialRaw(t, ctx, addr, "good")
	require.NoError(t, err)

	flood := rawFrames(t, addr, "flood")
	put, err := command.Encode(putCmd("f", "x", 0))
	require.NoError(t, err)
	var frames []byte
	const sent = 200
	for id := range uint64(sent) {
		frames, err = clientwire.AppendFrame(frames, clientwire.MaxVersion, id+1, &clientwire.Propose{Command: put}, 1<<20)
		require.NoError(t, err)
	}
	go func() { _, _ = flood.Write(frames) }()
	_, err = good.propose(t, ctx, putCmd("g", "y", 0))
	require.NoError(t, err, "another client is served during the flood")
	refused := 0
	for range sent {
		kind, _, m := readRawFrame(t, flood)
		if kind == clientwire.KindError {
			require.Equal(t, clientwire.CodeTooManyRequests, m.(*clientwire.ErrorMsg).Code)
			refused++
		}
	}
	t.Logf("%d of %d flooded requests refused", refused, sent)
	require.Positive(t, refused)

	// A bad frame ends its own connection, not the others.
	bad := rawFrames(t, addr, "bad")
	_, err = bad.Write([]byte{0, 0, 0, 10, clientwire.MaxVersion, 0xee, 0, 0, 0, 0, 0, 0, 0, 1})
	require.NoError(t, err)
	_, err = io.ReadAll(bad)
	require.NoError(t, err, "the member closed the connection")
	require.NoError(t, good.Ping(ctx))

	// good and flood are two clients of three: one more fits (once the
	// bad one's place is given back), then busy.
	for {
		if _, err = dialRaw(t, ctx, addr, "third"); err == nil || ctx.Err() != nil {
			break
		}
	}
	require.NoError(t, err)
	_, err = dialRaw(t, ctx, addr, "fourth")
	var re *clientwire.RefusedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, clientwire.RefuseBusy, re.Reason)
	require.NoError(t, good.Ping(ctx))
}

// TestServeClientsPolicy: ClientPolicy refuses identities with its
// reason, and a client writes only under its granted prefixes.
func TestServeClientsPolicy(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) {
		cfg.ClientPolicy = func(id string) (coord.ClientGrant, error) {
			switch id {
			case "worker":
				return coord.ClientGrant{WritePrefixes: []string{"jobs/", "locks/"}}, nil
			case "reader":
				return coord.ClientGrant{}, nil
			}
			return coord.ClientGrant{}, errors.New("unknown client")
		}
	})
	ctx := ctxT(t, 20*time.Second)
	addr := c.Node(0).Admin().ClientAddr()
	_, err := dialRaw(t, ctx, addr, "mallory")
	var re *clientwire.RefusedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, clientwire.RefuseForbidden, re.Reason)
	require.Contains(t, re.Message, "unknown client")

	w, err := dialRaw(t, ctx, addr, "worker")
	require.NoError(t, err)
	_, err = w.propose(t, ctx, putCmd("jobs/1", "x", 0))
	require.NoError(t, err)
	sid := w.newSession(t, ctx, c.Node(0).MinSessionTTL())
	_, err = w.propose(t, ctx, putCmd("locks/a/1", "", sid))
	require.NoError(t, err, "a recipe's prefix is granted like any key")
	for name, cmd := range map[string]*command.Command{
		"put elsewhere": putCmd("config/x", "x", 0),
		"delete":        {Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{{Type: command.OpDelete, Key: "config/x"}}}},
		"prefix delete": {Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{{Type: command.OpDelete, Key: "jo", Prefix: true}}}},
		"in else":       {Kind: command.KindTxn, Txn: &command.Txn{Else: []command.Op{{Type: command.OpPut, Key: "x"}}}},
	} {
		_, err := w.propose(t, ctx, cmd)
		require.Equal(t, clientwire.CodeForbidden, wireCode(err), "%s: %v", name, err)
	}
	rd, err := dialRaw(t, ctx, addr, "reader")
	require.NoError(t, err)
	_, err = rd.propose(t, ctx, putCmd("jobs/2", "x", 0))
	require.Equal(t, clientwire.CodeForbidden, wireCode(err))
	rr, err := rd.Read(ctx, &clientwire.Read{Key: "jobs/", Prefix: true})
	require.NoError(t, err, "reads are not restricted")
	require.Len(t, rr.KVs, 1)
	_, err = c.Node(0).Get(ctx, "config/x")
	require.ErrorIs(t, err, coord.ErrNotFound)
}

// TestServeClientsEndsAtClose: a listener the host passes is served until
// the member closes; Close ends every client connection and
// ServeClients returns ErrClosed.
func TestServeClientsEndsAtClose(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	ctx := ctxT(t, 20*time.Second)
	n := c.Node(0)
	require.Empty(t, n.Admin().ClientAddr())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- n.Admin().ServeClients(l) }()
	rc, err := dialRaw(t, ctx, l.Addr().String(), "w")
	require.NoError(t, err)
	require.NoError(t, rc.Ping(ctx))
	require.NoError(t, n.Close())
	require.ErrorIs(t, <-served, coord.ErrClosed)
	select {
	case <-rc.Done():
	case <-ctx.Done():
		t.Fatal("the client connection outlived the member")
	}
	require.ErrorIs(t, n.Admin().ServeClients(l), coord.ErrClosed, "a closed member serves nothing")
}

// A quiet watch's progress reports tell the client of a revision it does
// not have, never the same one again: an idle watch costs an idle cell
// nothing per interval (100,000 of them used to cost each member a third
// of a core at one report a second).
func TestServeWatchProgressOnlyWhenTheRevisionMoved(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 1, nil)
	n := c.Node(0)
	ctx := ctxT(t, 20*time.Second)
	rc, err := dialRaw(t, ctx, n.Admin().ClientAddr(), "quiet")
	require.NoError(t, err)
	// The member reports once an election timeout at most, whatever a
	// client asks.
	every := rc.Welcome().ElectionTimeout
	progress := make(chan int64, 1024)
	_, err = rc.Watch(ctx, &clientwire.WatchStart{Prefix: "quiet/", ProgressInterval: time.Millisecond}, func(m clientwire.Message) bool {
		if p, ok := m.(*clientwire.WatchProgress); ok {
			select {
			case progress <- p.Rev:
			default:
				return false
			}
		}
		return true
	})
	require.NoError(t, err)

	var told int64
	next := func() int64 {
		select {
		case rev := <-progress:
			require.Greater(t, rev, told, "a progress report at a revision the client already had")
			told = rev
			return rev
		case <-ctx.Done():
			t.Fatal("no progress report")
			return 0
		}
	}
	for i := range 5 {
		kv, err := n.Put(ctx, fmt.Sprintf("elsewhere/%d", i), []byte("x"))
		require.NoError(t, err)
		for next() < kv.ModRev {
		}
	}
	// Absence takes time to show: 5 intervals of a cell at rest, in
	// which a report at the same revision would come 5 times.
	quiet := time.After(5 * every)
	for {
		select {
		case rev := <-progress:
			t.Fatalf("progress report at %d after %d, with the cell at rest", rev, told)
		case <-quiet:
			return
		}
	}
}
