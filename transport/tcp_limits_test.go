package transport

import (
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// settledGoroutines waits until at most want goroutines run, or the
// count has not changed for a while, and returns the count.
func settledGoroutines(t *testing.T, want int) int {
	t.Helper()
	n, stable := runtime.NumGoroutine(), 0
	deadline := time.Now().Add(waitFor)
	for n > want && stable < 10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling a count, not synchronising
		m := runtime.NumGoroutine()
		if m == n {
			stable++
		} else {
			n, stable = m, 0
		}
	}
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// helloFrom makes c the connection of member from.
func helloFrom(t *testing.T, c net.Conn, from, to string) {
	t.Helper()
	_, err := c.Write(frameBytes(t, from, to, nil))
	require.NoError(t, err)
}

// requireHungUpAfter checks that the other end closed c, and not before
// min had passed since start.
func requireHungUpAfter(t *testing.T, c net.Conn, start time.Time, min time.Duration) {
	t.Helper()
	requireHungUp(t, c)
	assert.GreaterOrEqual(t, time.Since(start), min, "closed before its deadline")
}

func waitOpen(t *testing.T, tr *TCP, want int) {
	t.Helper()
	require.Eventually(t, func() bool {
		open, _ := tr.inLimit.counts()
		return open == want
	}, waitFor, time.Millisecond)
}

func TestTCPNoFrameDeadline(t *testing.T) {
	const deadline = 200 * time.Millisecond
	ca := newTestCA(t)
	for name, cfg := range map[string]TCPConfig{
		"plaintext": {Name: "a", HandshakeTimeout: deadline},
		"TLS":       {Name: "a", HandshakeTimeout: deadline, TLS: ca.mtls(t, "a")},
	} {
		t.Run(name, func(t *testing.T) {
			a := listen(t, cfg)
			start := time.Now()
			c := rawConn(t, a.Addr()) // says nothing, not even a TLS hello
			requireHungUpAfter(t, c, start, deadline)
			waitOpen(t, a, 0)
		})
	}
}

func TestTCPPartialFrameDeadline(t *testing.T) {
	const frameTimeout = 200 * time.Millisecond
	a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"b": "127.0.0.1:1"},
		FrameTimeout: frameTimeout, HandshakeTimeout: time.Minute, IdleTimeout: time.Minute})
	c := rawConn(t, a.Addr())
	helloFrom(t, c, "b", "a")
	frame := frameBytes(t, "b", "a", make([]byte, 1000))
	// Before the write: the member's deadline starts when the header
	// arrives, never earlier than this.
	start := time.Now()
	_, err := c.Write(frame[:100])
	require.NoError(t, err)
	requireHungUpAfter(t, c, start, frameTimeout)
	requireNothingReceived(t, a.Receive())
	assert.Zero(t, a.budget.used.Load(), "the frame's buffer is given back")
}

func TestTCPIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"b": "127.0.0.1:1", "c": "127.0.0.1:1"},
		IdleTimeout: idle, HandshakeTimeout: time.Minute})
	quiet := rawConn(t, a.Addr())
	start := time.Now() // before its last frame: the idle clock cannot start earlier
	helloFrom(t, quiet, "c", "a")

	// A connection that keeps talking outlives several idle timeouts.
	chatty := rawConn(t, a.Addr())
	helloFrom(t, chatty, "b", "a")
	for time.Since(start) < 3*idle {
		_, err := chatty.Write(frameBytes(t, "b", "a", []byte("beat")))
		require.NoError(t, err)
		recvOne(t, a.Receive())
		time.Sleep(idle / 10) // the pace of a heartbeat, not synchronisation
	}
	requireHungUpAfter(t, quiet, start, idle)
	_, err := chatty.Write(frameBytes(t, "b", "a", []byte("beat")))
	require.NoError(t, err)
	recvOne(t, a.Receive())
}

func TestTCPFirstFrameLimit(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"b": "127.0.0.1:1"}, HandshakeTimeout: time.Minute})
	c := rawConn(t, a.Addr())
	// A stranger may not start a frame over the first-frame limit, even
	// if it never sends its body.
	_, err := c.Write(binary.BigEndian.AppendUint32(nil, DefaultMaxFirstFrameSize+1))
	require.NoError(t, err)
	requireHungUp(t, c)
	assert.Zero(t, a.budget.peak.Load())

	// Once known, a member may.
	c = rawConn(t, a.Addr())
	helloFrom(t, c, "b", "a")
	_, err = c.Write(frameBytes(t, "b", "a", make([]byte, DefaultMaxFirstFrameSize+1)))
	require.NoError(t, err)
	assert.Len(t, recvOne(t, a.Receive()).Data, DefaultMaxFirstFrameSize+1)
}

func TestTCPBufferBudget(t *testing.T) {
	const budget = 256 << 10
	a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"b": "127.0.0.1:1"},
		BufferBudget: budget, MaxFrameSize: 1 << 20, FrameTimeout: time.Minute, HandshakeTimeout: time.Minute})
	// Three of b's connections each send part of a 1 MiB frame: more
	// than the budget holds together.
	var conns []net.Conn
	for range 3 {
		c := rawConn(t, a.Addr())
		helloFrom(t, c, "b", "a")
		frame := frameBytes(t, "b", "a", make([]byte, 1<<20-64))
		require.NoError(t, c.SetWriteDeadline(time.Now().Add(waitFor)))
		_, _ = c.Write(frame[:200<<10]) // may fail once a closes it
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool {
		open, _ := a.inLimit.counts()
		return open < 3
	}, waitFor, time.Millisecond, "a connection over the budget must be closed long before the frame deadline")
	assert.LessOrEqual(t, a.budget.peak.Load(), int64(budget))
	for _, c := range conns {
		c.Close()
	}
	waitOpen(t, a, 0)
	assert.Zero(t, a.budget.used.Load())
}

func TestTCPConnectionCaps(t *testing.T) {
	t.Run("per IP", func(t *testing.T) {
		a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"b": "127.0.0.1:1"},
			MaxConnsPerIP: 4, HandshakeTimeout: time.Minute})
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: waitFor}
		var held []net.Conn
		for range 10 {
			c, err := d.Dial("tcp", a.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			held = append(held, c)
		}
		hungUp := 0
		for _, c := range held {
			require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
			var b [1]byte
			if _, err := c.Read(b[:]); !isTimeout(err) {
				hungUp++
			}
		}
		assert.Equal(t, 6, hungUp, "connections over the per-IP cap are closed at once")
		// Another address is still served meanwhile.
		c := rawConn(t, a.Addr())
		_, err := c.Write(frameBytes(t, "b", "a", []byte("hi")))
		require.NoError(t, err)
		assert.Equal(t, "hi", string(recvOne(t, a.Receive()).Data))
	})

	t.Run("2000 idle connections", func(t *testing.T) {
		const (
			maxConns = 64
			flood    = 2000
			deadline = 500 * time.Millisecond
		)
		before := settledGoroutines(t, 0)
		a := listen(t, TCPConfig{Name: "a", MaxConns: maxConns, MaxConnsPerIP: flood, HandshakeTimeout: deadline})
		b := listen(t, TCPConfig{Name: "b", Peers: map[string]string{"a": a.Addr()}})
		a.AddPeer("b", b.Addr())
		base := settledGoroutines(t, before)
		heap0 := heapInUse()
		conns := make([]net.Conn, 0, flood)
		for range flood {
			c, err := net.DialTimeout("tcp", a.Addr(), waitFor)
			require.NoError(t, err)
			conns = append(conns, c)
		}
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		during := runtime.NumGoroutine()
		heap1 := heapInUse()
		// A member's connection is still served while the flood lasts,
		// or at the latest once the deadline has cleared it.
		sendUntil(t, b, a, seqEnv("a", 1))
		for _, c := range conns {
			requireHungUp(t, c)
		}
		waitOpen(t, a, 1) // b's
		_, peak := a.inLimit.counts()
		assert.LessOrEqual(t, peak, maxConns)
		after := settledGoroutines(t, base)
		heap2 := heapInUse()
		t.Logf("%d idle connections, cap %d, deadline %v: peak open %d; goroutines %d before, %d during, %d after; heap in use %.1f MiB before, %.1f MiB during, %.1f MiB after",
			flood, maxConns, deadline, peak, base, during, after, mib(heap0), mib(heap1), mib(heap2))
		assert.LessOrEqual(t, after, base+2, "goroutines left behind") // b's connection: a reader here, a writer and a watcher there
		assert.LessOrEqual(t, during, base+maxConns+8)
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func TestTCPStalledFrameFlood(t *testing.T) {
	// 40 connections of a known member (plaintext: anyone can claim to
	// be one) each start a frame of the size limit, send part of it,
	// and stall.
	const (
		conns        = 40
		frameTimeout = time.Second
	)
	cases := []struct {
		name   string
		sent   int   // bytes of each frame's body sent before stalling
		budget int64 // 0 = default
	}{
		{"a few bytes each", 100, 0},
		{"1 MiB each, over the budget", 1 << 20, 8 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := settledGoroutines(t, 0)
			a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"b": "127.0.0.1:1"},
				BufferBudget: tc.budget, FrameTimeout: frameTimeout, MinFrameRate: 1 << 30, MaxConnsPerIP: conns,
				HandshakeTimeout: time.Minute, IdleTimeout: time.Minute})
			base := settledGoroutines(t, before)
			heap0 := heapInUse()
			prefix := binary.BigEndian.AppendUint32(nil, DefaultMaxFrameSize-1)
			junk := make([]byte, tc.sent)
			var wg sync.WaitGroup
			cs := make([]net.Conn, conns)
			start := time.Now()
			for i := range cs {
				cs[i] = rawConn(t, a.Addr())
				helloFrom(t, cs[i], "b", "a")
				wg.Go(func() {
					c := cs[i]
					_ = c.SetWriteDeadline(time.Now().Add(waitFor))
					if _, err := c.Write(prefix); err != nil {
						return
					}
					_, _ = c.Write(junk) // fails when a closes the connection
				})
			}
			setup := time.Since(start)
			// Sample the heap and the open count while the flood stalls,
			// before the deadline. On a loaded machine the member may
			// accept the last connections late, so the count is the most
			// seen open at once.
			var peakHeap uint64
			var openDuring int
			for {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peakHeap = max(peakHeap, ms.HeapInuse)
				open, _ := a.inLimit.counts()
				openDuring = max(openDuring, open)
				if since := time.Since(start); since >= frameTimeout/2 && (openDuring == conns || since >= frameTimeout*9/10) {
					break
				}
				time.Sleep(10 * time.Millisecond) // sampling, not synchronising
			}
			during := runtime.NumGoroutine()
			sampled := time.Since(start)
			for _, c := range cs {
				requireHungUp(t, c)
			}
			wg.Wait()
			waitOpen(t, a, 0)
			after := settledGoroutines(t, base)
			heap2 := heapInUse()
			t.Logf("%d connections x (%d MiB prefix, %d bytes sent, stall), budget %d MiB, frame timeout %v: "+
				"set up in %v, %d open after %v, budget peak %.2f MiB, all closed after %v; goroutines %d before, %d during, %d after; "+
				"heap in use %.1f MiB before, peak %.1f MiB during, %.1f MiB after",
				conns, DefaultMaxFrameSize>>20, tc.sent, a.budget.limit>>20, frameTimeout,
				setup.Round(time.Millisecond), openDuring, sampled.Round(time.Millisecond), mib(uint64(a.budget.peak.Load())), time.Since(start).Round(time.Millisecond),
				base, during, after, mib(heap0), mib(peakHeap), mib(heap2))
			if tc.budget == 0 && sampled < frameTimeout {
				assert.Equal(t, conns, openDuring, "under the budget, only the deadline closes them")
				assert.GreaterOrEqual(t, time.Since(start), frameTimeout)
			}
			assert.LessOrEqual(t, a.budget.peak.Load(), a.budget.limit)
			assert.Zero(t, a.budget.used.Load())
			// The budget, the garbage of growing buffers, and the test's own.
			assert.Less(t, peakHeap, heap0+uint64(2*a.budget.peak.Load())+uint64(tc.sent)+(16<<20), "memory bounded by the budget")
			assert.LessOrEqual(t, after, base)
			requireNothingReceived(t, a.Receive())
		})
	}
}

// flakyListener fails Accept a number of times, then blocks until closed.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
	calls []time.Time
	done  chan struct{}
	once  sync.Once
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls = append(l.calls, time.Now())
	fail := len(l.calls) <= l.fails
	l.mu.Unlock()
	if fail {
		return nil, errors.New("accept: too many open files")
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *flakyListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func TestTCPAcceptErrorsBackOff(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	const fails = 9
	ln := &flakyListener{Listener: inner, fails: fails, done: make(chan struct{})}
	var logs logBuffer
	a := newTCP(TCPConfig{Name: "a", Logger: logs.logger()}, nil, ln)
	defer a.Close()
	// Outbound dials do not wait on accept.
	b := listen(t, TCPConfig{Name: "b", Peers: map[string]string{"a": "127.0.0.1:1"}})
	a.AddPeer("b", b.Addr())
	sendUntil(t, a, b, seqEnv("b", 1))

	require.Eventually(t, func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return len(ln.calls) > fails
	}, waitFor, time.Millisecond)
	ln.mu.Lock()
	calls := ln.calls
	ln.mu.Unlock()
	backoff := minAcceptBackoff
	for i := 1; i < len(calls); i++ {
		assert.GreaterOrEqual(t, calls[i].Sub(calls[i-1]), backoff, "retry %d", i)
		backoff = min(2*backoff, maxAcceptBackoff)
	}
	lines := strings.Count(logs.String(), "msg=\"transport: accept\"")
	assert.Equal(t, logBurst, lines, "accept errors are rate limited")
}

func TestLogLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLogLimiter(2, time.Second)
	l.now = func() time.Time { return now }
	allow := func() (bool, int) { return l.allow() }
	ok, n := allow()
	assert.True(t, ok)
	assert.Zero(t, n)
	ok, _ = allow()
	assert.True(t, ok)
	for range 5 {
		ok, _ = allow()
		assert.False(t, ok)
	}
	now = now.Add(time.Second)
	ok, n = allow()
	assert.True(t, ok)
	assert.Equal(t, 5, n, "the next line reports what was suppressed")
	ok, n = allow()
	assert.True(t, ok)
	assert.Zero(t, n)
}

func TestConnLimiter(t *testing.T) {
	l := newConnLimiter(3, 2)
	assert.True(t, l.acquire("x"))
	assert.True(t, l.acquire("x"))
	assert.False(t, l.acquire("x"), "per-IP cap")
	assert.True(t, l.acquire("y"))
	assert.False(t, l.acquire("z"), "total cap")
	l.release("x")
	assert.True(t, l.acquire("z"))
	open, peak := l.counts()
	assert.Equal(t, 3, open)
	assert.Equal(t, 3, peak)
}
