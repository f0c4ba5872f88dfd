package coord_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/internal/clientwire"
	"github.com/stretchr/testify/require"
)

// These tests play clients that attack a member's client door at small
// limits, and check the member's own counters (Status().Clients): the
// handshakes it refused, the clients it cut off, the bytes it queued.

// doorStats reads the member's client door counters.
func doorStats(n *coord.Node) coord.ClientStatus { return n.Status().Clients }

// rawDoor dials addr (from local, if set) and does the client handshake
// by hand, announcing maxFrame; readBuf, when positive, shrinks the
// socket's receive buffer first, so a client that does not read stops
// the member's writes soon. It returns the connection and the version
// agreed.
func rawDoor(t *testing.T, addr, name string, maxFrame uint32, readBuf int) (net.Conn, uint8) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	if readBuf > 0 {
		require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(readBuf))
	}
	return conn, helloRaw(t, conn, name, maxFrame)
}

func helloRaw(t *testing.T, conn net.Conn, name string, maxFrame uint32) uint8 {
	t.Helper()
	hello, err := clientwire.AppendFrame(nil, 0, 0, &clientwire.Hello{MinVersion: clientwire.MinVersion,
		MaxVersion: clientwire.MaxVersion, Name: name, MaxFrame: maxFrame}, 4096)
	require.NoError(t, err)
	_, err = conn.Write(hello)
	require.NoError(t, err)
	kind, _, m := readRawFrame(t, conn)
	require.Equal(t, clientwire.KindWelcome, kind, "%+v", m)
	return m.(*clientwire.Welcome).Version
}

// frames appends n frames of m, with request IDs from first (0: none).
func frames(t *testing.T, b []byte, version uint8, first uint64, n int, m clientwire.Message) []byte {
	t.Helper()
	for i := range n {
		id := uint64(0)
		if first > 0 {
			id = first + uint64(i)
		}
		var err error
		b, err = clientwire.AppendFrame(b, version, id, m, clientwire.DefaultMaxFrame)
		require.NoError(t, err)
	}
	return b
}

// closedByPeer waits until the peer has closed conn, reading (and
// dropping) what it had sent first.
func closedByPeer(t *testing.T, conn net.Conn, within time.Duration) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(within)))
	_, err := io.Copy(io.Discard, conn)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil // closed with our bytes unread
	}
	require.NoError(t, err, "the member did not close the connection within %v", within)
}

// Finding 2: silent connections used to hold every place at the door
// for 10 s of TLS and 10 s of Hello each (and 2 × MaxClients places in
// all), so a few thousand of them, dialled again as soon as dropped,
// locked new clients out. Now handshakes in progress are bounded per
// address and in total, and a new one displaces the oldest: honest
// clients from another address all get in while the flood goes on, and
// the member never holds more than its bound.
func TestClientDoorSilentFlood(t *testing.T) {
	t.Parallel()
	honestFrom := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no second loopback address to dial from: %v", err)
	} else {
		l.Close()
	}
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) {
		cfg.MaxClients = 4
		cfg.ClientMaxPending = 8
		cfg.ClientHandshakeTimeout = 2 * time.Second
	})
	n := c.Node(0)
	addr := n.Admin().ClientAddr()
	ctx := ctxT(t, 60*time.Second)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	var dials atomic.Int64
	var maxPending atomic.Int64
	wg.Go(func() {
		for {
			if p := int64(doorStats(n).Pending); p > maxPending.Load() {
				maxPending.Store(p)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	const flood = 20
	for range flood {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				conn, err := net.Dial("tcp", addr)
				if err == nil {
					dials.Add(1)
					done := make(chan struct{})
					go func() {
						select {
						case <-stop:
						case <-done:
						}
						conn.Close()
					}()
					_, _ = conn.Read(make([]byte, 1)) // until the member drops it
					close(done)
				}
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	require.Eventually(t, func() bool { return dials.Load() >= 2*flood }, 20*time.Second, 5*time.Millisecond)

	d := net.Dialer{LocalAddr: honestFrom, Timeout: 3 * time.Second}
	for i := range 10 {
		conn, err := d.DialContext(ctx, "tcp", addr)
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		helloRaw(t, conn, "honest", clientwire.DefaultMaxFrame)
		conn.Close()
		t.Logf("honest client %d admitted; %d silent dials so far", i, dials.Load())
	}
	st := doorStats(n)
	t.Logf("door: %+v, most pending seen %d", st, maxPending.Load())
	require.Positive(t, st.Refused, "silent connections were dropped")
	require.LessOrEqual(t, maxPending.Load(), int64(8), "handshakes in progress within ClientMaxPending")
}

// Connections per identity are bounded once admitted.
func TestClientDoorPerIdentity(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) { cfg.ClientMaxPerIdentity = 2 })
	n := c.Node(0)
	ctx := ctxT(t, 20*time.Second)
	for range 2 {
		_, err := dialRaw(t, ctx, n.Admin().ClientAddr(), "bob")
		require.NoError(t, err)
	}
	_, err := dialRaw(t, ctx, n.Admin().ClientAddr(), "bob")
	var re *clientwire.RefusedError
	require.ErrorAs(t, err, &re, "a third connection of bob")
	require.Equal(t, clientwire.RefuseBusy, re.Reason)
	_, err = dialRaw(t, ctx, n.Admin().ClientAddr(), "alice")
	require.NoError(t, err, "another identity is admitted")
	st := doorStats(n)
	require.Equal(t, 3, st.Admitted)
	require.Equal(t, uint64(1), st.Refused)
}

// Finding 9: admitted clients that send nothing, or half a frame, used
// to stay open for good (the member never set an idle timeout), so one
// address could fill MaxClients. Now a frame left half-sent is closed
// after the I/O timeout and a silent connection after the idle one; a
// client that pings stays.
func TestClientDoorIdleAndStalled(t *testing.T) {
	t.Parallel()
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) {
		cfg.ClientIdleTimeout = 4 * time.Second
		cfg.ClientIOTimeout = 200 * time.Millisecond
	})
	n := c.Node(0)
	ctx := ctxT(t, 30*time.Second)
	addr := n.Admin().ClientAddr()
	idle, _ := rawDoor(t, addr, "idle", clientwire.DefaultMaxFrame, 0)
	live, err := dialRaw(t, ctx, addr, "live")
	require.NoError(t, err)
	stalled, v := rawDoor(t, addr, "stalled", clientwire.DefaultMaxFrame, 0)
	half := frames(t, nil, v, 1, 1, &clientwire.Read{Key: string(bytes.Repeat([]byte("k"), 200))})
	_, err = stalled.Write(half[:len(half)/2])
	require.NoError(t, err)

	closedByPeer(t, stalled, 3*time.Second)
	require.Eventually(t, func() bool { return doorStats(n).CutIdle == 1 }, 2*time.Second, time.Millisecond,
		"the half-sent frame, well before the idle timeout")
	pings := time.NewTicker(500 * time.Millisecond)
	defer pings.Stop()
	go func() {
		for {
			select {
			case <-live.Done():
				return
			case <-pings.C:
				_ = live.Ping(ctx)
			}
		}
	}()
	closedByPeer(t, idle, 20*time.Second)
	require.Eventually(t, func() bool { return doorStats(n).CutIdle == 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, live.Ping(ctx), "a client that pings is never idle")
	require.Equal(t, 1, doorStats(n).Admitted)
}

// Findings 4 and 8 (the reply side): a client that asks for far more
// replies than it reads used to have them all queued (reply slots
// counted replies, not bytes), and nothing ever ended its connection.
// Now its queue stays within ClientQueueBytes and it is cut off; other
// clients are served throughout.
func TestClientDoorSlowReaderCut(t *testing.T) {
	t.Parallel()
	const limit = 256 << 10
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) {
		cfg.ClientQueueBytes = limit
		cfg.ClientIOTimeout = 500 * time.Millisecond
	})
	n := c.Node(0)
	ctx := ctxT(t, 30*time.Second)
	_, err := n.Put(ctx, "big", bytes.Repeat([]byte("v"), 32<<10))
	require.NoError(t, err)
	good, err := dialRaw(t, ctx, n.Admin().ClientAddr(), "good")
	require.NoError(t, err)

	slow, v := rawDoor(t, n.Admin().ClientAddr(), "slow", clientwire.MinMaxFrame, 4096)
	// Waves of reads until the member cuts it off: the member refuses
	// reads past its in-flight limit (small errors), and the replies it
	// serves fill the kernel's send buffer (megabytes on loopback)
	// before they queue in the member, so one burst of a thousand may
	// never reach the queue's limit; waves keep asking as the member
	// frees its places.
	const wave = 64
	reads := frames(t, nil, v, 1, 200*wave, &clientwire.Read{Key: "big"})
	perFrame := len(reads) / (200 * wave)
	go func() {
		for b := reads; len(b) > 0 && doorStats(n).CutSlow == 0; b = b[wave*perFrame:] {
			if _, err := slow.Write(b[:wave*perFrame]); err != nil {
				return // cut off
			}
		}
	}()
	require.Eventually(t, func() bool { return doorStats(n).CutSlow == 1 }, 20*time.Second, 5*time.Millisecond,
		"the slow reader was never cut off: %+v", doorStats(n))
	require.NoError(t, good.Ping(ctx), "another client is served")
	require.Eventually(t, func() bool { return doorStats(n).QueuedBytes == 0 }, 20*time.Second, 5*time.Millisecond)
	st := doorStats(n)
	t.Logf("door: %+v", st)
	// The good client's pong is the only other frame ever queued.
	require.LessOrEqual(t, st.QueuedPeak, int64(limit+1024))
}

// Finding 3: a client holding watches it never reads, while values are
// put under them, used to have every event queued (watch queues were
// bounded in frames, 64 each, the connection's not at all). Now its
// watches end as slow once their share of ClientQueueBytes is queued,
// and its queue never holds more; writes go on meanwhile. (A client
// that still does not read is then cut off, as TestClientDoorSlowReaderCut
// shows for replies.)
func TestClientDoorWatchesBoundedInBytes(t *testing.T) {
	t.Parallel()
	const limit = 256 << 10
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) { cfg.ClientQueueBytes = limit })
	n := c.Node(0)
	ctx := ctxT(t, 30*time.Second)
	// The socket keeps its usual buffers: this client reads in the end,
	// and a tiny receive window would make the kernel trickle it.
	w, v := rawDoor(t, n.Admin().ClientAddr(), "watcher", clientwire.MinMaxFrame, 0)
	// 16 MB of events in all, more than the kernel's buffers take.
	const watches, puts = 16, 64
	var b []byte
	for id := range uint64(watches) {
		b = frames(t, b, v, id+1, 1, &clientwire.WatchStart{WatchID: id + 1, Prefix: "w/"})
	}
	_, err := w.Write(b)
	require.NoError(t, err)
	for range watches { // each watch runs once its OK is sent
		kind, _, m := readRawFrame(t, w)
		require.Equal(t, clientwire.KindOK, kind, "%+v", m)
	}
	value := bytes.Repeat([]byte("e"), 16<<10)
	for i := range puts {
		_, err := n.Put(ctx, "w/"+string(rune('a'+i%26)), value)
		require.NoError(t, err, "put %d", i)
	}
	// Now cancel every watch and read what the member queued: each
	// watch's events, then its end (slow, or cancelled if it kept up).
	b = nil
	for id := range uint64(watches) {
		b = frames(t, b, v, 0, 1, &clientwire.WatchCancel{WatchID: id + 1})
	}
	_, err = w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.SetReadDeadline(time.Now().Add(20*time.Second)))
	events := map[uint64]int{}
	ended := map[uint64]clientwire.Code{}
	slow := 0
	for len(ended) < watches {
		kind, _, m := readRawFrame(t, w)
		switch m := m.(type) {
		case *clientwire.WatchEvents:
			events[m.WatchID] += len(m.Events)
		case *clientwire.WatchEnd:
			ended[m.WatchID] = m.Code
			if m.Code == clientwire.CodeSlowWatcher {
				slow++
			}
		default:
			t.Fatalf("frame of kind %d: %+v", kind, m)
		}
	}
	st := doorStats(n)
	t.Logf("door: %+v; events delivered per watch: %v; ends: %v", st, events, ended)
	require.LessOrEqual(t, st.QueuedPeak, int64(limit))
	require.Positive(t, slow, "watches that fell behind ended as slow")
}

// Finding 5: keep-alive frames of one-byte IDs used to cost the member
// about 30 times their size (8 bytes per ID, and a map and slices sized
// by the count). Now a KeepAlive of more than MaxKeepAliveIDs IDs is a
// protocol violation, refused before anything is sized by it.
func TestClientDoorKeepAliveIDs(t *testing.T) {
	c := serveCluster(t, 1, nil)
	n := c.Node(0)
	conn, v := rawDoor(t, n.Admin().ClientAddr(), "ka", clientwire.DefaultMaxFrame, 0)
	ids := make([]int64, 1<<20) // one byte each on the wire
	for i := range ids {
		ids[i] = 1
	}
	b := frames(t, nil, v, 0, 4, &clientwire.KeepAlive{Seq: 1, SessionIDs: ids})
	ids = nil
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	go func() { _, _ = conn.Write(b) }()
	closedByPeer(t, conn, 10*time.Second)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes allocated in the process while the member refused %d bytes of keep-alives", alloc, len(b))
	require.Less(t, alloc, uint64(32<<20))
	ctx := ctxT(t, 10*time.Second)
	_, err := n.Put(ctx, "still", []byte("up"))
	require.NoError(t, err)
}

// Finding 8: a client that asks for replies, reads none, then half-closes
// (or sends one bad frame) and keeps its socket open used to block
// Node.Close for as long as it liked: the member's writer waited in a
// write with no deadline, and Serve for it. Now the member ends such a
// connection itself at once, and Close returns promptly.
func TestClientDoorCloseWithUnreadReplies(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"half-close", "bad frame"} {
		t.Run(end, func(t *testing.T) {
			c := serveCluster(t, 1, func(_ int, cfg *coord.Config) { cfg.ClientIOTimeout = time.Hour })
			n := c.Node(0)
			ctx := ctxT(t, 30*time.Second)
			// Four replies of 3 MB each (a prefix of 48 values of 64
			// KiB): more than the kernel buffers, within the queue's
			// 16 MiB.
			value := bytes.Repeat([]byte("v"), 64<<10)
			for i := range 48 {
				_, err := n.Put(ctx, fmt.Sprintf("big/%02d", i), value)
				require.NoError(t, err)
			}
			conn, v := rawDoor(t, n.Admin().ClientAddr(), "never", clientwire.DefaultMaxFrame, 4096)
			_, err := conn.Write(frames(t, nil, v, 1, 4, &clientwire.Read{Key: "big/", Prefix: true}))
			require.NoError(t, err)
			// The member has written what the kernel takes, and waits
			// in a write for the rest.
			require.Eventually(t, func() bool { return doorStats(n).QueuedBytes >= 6<<20 }, 20*time.Second, 5*time.Millisecond,
				"the replies were never queued: %+v", doorStats(n))
			if end == "bad frame" {
				_, err = conn.Write(frames(t, nil, v, 0, 1, &clientwire.Ping{})) // a request without an ID
			} else {
				err = conn.(*net.TCPConn).CloseWrite()
			}
			require.NoError(t, err)
			require.Eventually(t, func() bool { return doorStats(n).Admitted == 0 }, 20*time.Second, 5*time.Millisecond,
				"the member kept the connection: %+v", doorStats(n))
			closeWithin(t, n, 15*time.Second)
		})
	}
}

// Node.Close returns within its bound while a TLS client that never
// reads holds replies queued and keeps sending: nothing waits on the
// client.
func TestClientDoorCloseWhileClientNeverReads(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) {
		cfg.TLS = ca.config(t, cfg.Name)
		cfg.ClientIOTimeout = time.Hour
	})
	n := c.Node(0)
	ctx := ctxT(t, 30*time.Second)
	_, err := n.Put(ctx, "big", bytes.Repeat([]byte("v"), 64<<10))
	require.NoError(t, err)
	cfg := ca.config(t, "never")
	cfg.ServerName = n.Status().Name
	raw, err := net.Dial("tcp", n.Admin().ClientAddr())
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.(*net.TCPConn).SetReadBuffer(4096))
	conn := tls.Client(raw, cfg)
	require.NoError(t, conn.HandshakeContext(ctx))
	v := helloRaw(t, conn, "never", clientwire.DefaultMaxFrame)
	b := frames(t, nil, v, 1, 10000, &clientwire.Read{Key: "big"})
	go func() { _, _ = conn.Write(b) }()
	require.Eventually(t, func() bool { return doorStats(n).QueuedBytes >= 1<<20 }, 20*time.Second, 5*time.Millisecond)
	closeWithin(t, n, 15*time.Second)
}

// closeWithin closes n and fails if that takes longer than d.
func closeWithin(t *testing.T, n *coord.Node, d time.Duration) {
	t.Helper()
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- n.Close() }()
	select {
	case <-closed:
		t.Logf("Close took %v", time.Since(start))
	case <-time.After(d):
		t.Fatalf("Node.Close still blocked after %v", d)
	}
}
