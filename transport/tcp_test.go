package transport

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logBuffer collects a transport's log lines, for tests to wait on.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) contains(s string) bool { return strings.Contains(l.String(), s) }

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func listen(t *testing.T, cfg TCPConfig) *TCP {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	tr, err := ListenTCP(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// connect tells every transport where the others are.
func connect(trs map[string]*TCP) {
	for _, a := range trs {
		for name, b := range trs {
			a.AddPeer(name, b.Addr())
		}
	}
}

// sendUntil resends env every few milliseconds until to receives it, for
// links that are coming back up and may lose a frame or two on the way.
func sendUntil(t *testing.T, from *TCP, to *TCP, env Envelope) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitFor)
	for {
		require.NoError(t, from.Send([]Envelope{env}))
		select {
		case got := <-to.Receive():
			if bytes.Equal(got.Data, env.Data) {
				return
			}
		case <-tick.C:
		case <-deadline:
			require.FailNow(t, "never delivered", "%s -> %s", from.name, env.To)
		}
	}
}

// recvSeq waits for the envelope carrying seq, skipping lower sequence
// numbers: stale copies left by sendUntil's retries.
func recvSeq(t *testing.T, ch <-chan Envelope, seq int) Envelope {
	t.Helper()
	for {
		env := recvOne(t, ch)
		got := seqOf(t, env)
		if got == seq {
			return env
		}
		require.Less(t, got, seq, "unexpected envelope from %s", env.From)
	}
}

func TestTCPThreeMembers(t *testing.T) {
	names := []string{"a", "b", "c"}
	trs := make(map[string]*TCP)
	for _, name := range names {
		trs[name] = listen(t, TCPConfig{Name: name})
	}
	connect(trs)
	const count = 200
	for i := range count {
		for _, from := range names {
			var batch []Envelope
			for _, to := range names {
				if to != from {
					batch = append(batch, seqEnv(to, i))
				}
			}
			require.NoError(t, trs[from].Send(batch))
		}
	}
	for _, to := range names {
		next := map[string]int{}
		for _, env := range recvN(t, trs[to].Receive(), 2*count) {
			require.Equal(t, to, env.To)
			require.Equal(t, next[env.From], seqOf(t, env), "order from %s", env.From)
			next[env.From]++
		}
		assert.Len(t, next, 2)
	}
}

func TestTCPSendSemantics(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a", MaxFrameSize: 1 << 10})
	b := listen(t, TCPConfig{Name: "b", Peers: map[string]string{"a": a.Addr()}})
	a.AddPeer("b", b.Addr())

	// To self: delivered locally. To an unknown member: dropped quietly.
	require.NoError(t, a.Send([]Envelope{seqEnv("a", 1), seqEnv("nobody", 2)}))
	assert.Equal(t, 1, seqOf(t, recvOne(t, a.Receive())))

	// Too large: reported, and the rest of the batch still goes.
	big := Envelope{To: "b", Data: make([]byte, 2<<10)}
	err := a.Send([]Envelope{big, seqEnv("b", 3)})
	require.ErrorIs(t, err, ErrFrameTooLarge)
	assert.Equal(t, 3, seqOf(t, recvOne(t, b.Receive())))

	// Data is copied on Send.
	buf := []byte("hello")
	require.NoError(t, a.Send([]Envelope{{To: "b", Data: buf}}))
	copy(buf, "XXXXX")
	assert.Equal(t, "hello", string(recvOne(t, b.Receive()).Data))

	require.NoError(t, a.Close())
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Send([]Envelope{seqEnv("b", 4)}), ErrClosed)
	requireClosed(t, a.Receive())
}

func TestTCPReconnect(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a"})
	b := listen(t, TCPConfig{Name: "b"})
	addr := b.Addr()
	a.AddPeer("b", addr)
	b.AddPeer("a", a.Addr())
	sendUntil(t, a, b, seqEnv("b", 1))
	sendUntil(t, b, a, seqEnv("a", 2))

	require.NoError(t, b.Close())
	// Sends while b is down are dropped, never blocked.
	for i := range 100 {
		require.NoError(t, a.Send([]Envelope{seqEnv("b", 100+i)}))
	}
	b2 := listen(t, TCPConfig{Name: "b", Addr: addr, Peers: map[string]string{"a": a.Addr()}})
	sendUntil(t, a, b2, seqEnv("b", 3))
	sendUntil(t, b2, a, seqEnv("a", 4))
}

func TestTCPSendNeverBlocks(t *testing.T) {
	// A peer that accepts and then never reads.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	a := listen(t, TCPConfig{Name: "a", QueueSize: 16, Peers: map[string]string{"stuck": ln.Addr().String()}})
	data := make([]byte, 64<<10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 { // 128 MiB: far beyond what socket buffers hold
			_ = a.Send([]Envelope{{To: "stuck", Data: data}})
		}
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		require.FailNow(t, "Send blocked on a peer that does not read")
	}
	c := <-accepted
	defer c.Close()
	require.NoError(t, a.Close(), "Close must cut a writer stuck in Write")
}

// rawConn dials a transport directly, to write bytes no transport would.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// requireHungUp checks that the other end closed c.
func requireHungUp(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitFor)))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) {
		require.False(t, ne.Timeout(), "connection left open: %v", err)
	}
}

func frameBytes(t *testing.T, from, to string, data []byte) []byte {
	t.Helper()
	buf, err := encodeFrame(from, to, data, DefaultMaxFrameSize)
	require.NoError(t, err)
	defer putFrameBuf(buf)
	return bytes.Clone(buf.Bytes())
}

func TestTCPBadInputClosesOnlyThatConnection(t *testing.T) {
	var logs logBuffer
	a := listen(t, TCPConfig{Name: "a", MaxFrameSize: 1 << 20, Logger: logs.logger()})
	b := listen(t, TCPConfig{Name: "b"})
	connect(map[string]*TCP{"a": a, "b": b})
	sendUntil(t, b, a, seqEnv("a", 1))
	sendUntil(t, a, b, seqEnv("b", 2))

	oversized := binary.BigEndian.AppendUint32(nil, 1<<31) // checked before any allocation
	badVersion := []byte{0, 0, 0, 5, 0x94, 0x02, 0xa0, 0xa0, 0xc0}
	cases := []struct {
		name, bytes, log string
	}{
		{"oversized", string(oversized), "frame too large"},
		{"garbage", "\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1", "malformed frame"},
		{"bad version", string(badVersion), "unknown format version 2"},
		{"wrong member", string(frameBytes(t, "b", "z", []byte("x"))), "frame for another member"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := rawConn(t, a.Addr())
			_, err := c.Write([]byte(tc.bytes))
			require.NoError(t, err)
			requireHungUp(t, c)
			assert.True(t, logs.contains(tc.log), "log lacks %q", tc.log)
			// The established peer connections are untouched.
			require.NoError(t, b.Send([]Envelope{seqEnv("a", 10+i)}))
			recvSeq(t, a.Receive(), 10+i)
			require.NoError(t, a.Send([]Envelope{seqEnv("b", 20+i)}))
			recvSeq(t, b.Receive(), 20+i)
		})
	}
}

func TestTCPValidFrameFromRawConn(t *testing.T) {
	// Pins the wire format: a frame built by hand is accepted, from a
	// known peer.
	a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"x": "127.0.0.1:1"}})
	c := rawConn(t, a.Addr())
	body := []byte{0x94, 0x01, 0xa1, 'x', 0xa1, 'a', 0xc4, 0x02, 'h', 'i'}
	_, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	require.NoError(t, err)
	env := recvOne(t, a.Receive())
	assert.Equal(t, Envelope{From: "x", To: "a", Data: []byte("hi")}, env)
}

// testCA issues certificates valid for both TLS client and server use on
// 127.0.0.1, as cell members need.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) issue(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// mtls is a member's config: its certificate, and the CA it trusts for
// both servers and clients.
func (ca *testCA) mtls(t *testing.T, name string) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, name)},
		RootCAs:      ca.pool,
		ClientCAs:    ca.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

func TestTCPMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	var logs logBuffer
	a := listen(t, TCPConfig{Name: "a", TLS: ca.mtls(t, "a"), Logger: logs.logger()})
	b := listen(t, TCPConfig{Name: "b", TLS: ca.mtls(t, "b")})
	connect(map[string]*TCP{"a": a, "b": b})
	sendUntil(t, a, b, seqEnv("b", 1))
	sendUntil(t, b, a, seqEnv("a", 2))

	refusals := 0
	requireRefused := func(t *testing.T) {
		t.Helper()
		refusals++
		require.Eventually(t, func() bool {
			return strings.Count(logs.String(), "refused inbound connection") >= refusals
		}, waitFor, time.Millisecond)
		// The refused connection never reached frame reading, so
		// nothing of the intruder's can arrive from now on. Check it
		// did not before, and that a still hears from b.
		require.NoError(t, b.Send([]Envelope{seqEnv("a", 100+refusals)}))
		env := recvSeq(t, a.Receive(), 100+refusals) // fails on any intruder frame
		assert.Equal(t, "b", env.From)
	}

	t.Run("no client certificate", func(t *testing.T) {
		c, err := tls.Dial("tcp", a.Addr(), &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS13})
		require.NoError(t, err) // TLS 1.3: the server judges the client after this
		defer c.Close()
		_, _ = c.Write(frameBytes(t, "mallory", "a", []byte("let me in")))
		requireHungUp(t, c)
		requireRefused(t)
	})

	t.Run("certificate from another CA", func(t *testing.T) {
		rogue := newTestCA(t)
		cfg := rogue.mtls(t, "mallory")
		cfg.RootCAs = ca.pool // trusts a, but a does not trust it
		m := listen(t, TCPConfig{Name: "mallory", TLS: cfg, Peers: map[string]string{"a": a.Addr()}})
		require.NoError(t, m.Send([]Envelope{{To: "a", Data: []byte("let me in")}}))
		requireRefused(t)
	})

	t.Run("plaintext", func(t *testing.T) {
		c := rawConn(t, a.Addr())
		_, _ = c.Write(frameBytes(t, "mallory", "a", []byte("let me in")))
		requireHungUp(t, c)
		requireRefused(t)
	})
}

func TestTCPAddPeerMoves(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a"})
	known := map[string]string{"a": a.Addr()}
	b1 := listen(t, TCPConfig{Name: "b", Peers: known})
	a.AddPeer("b", b1.Addr())
	sendUntil(t, a, b1, seqEnv("b", 1))
	b2 := listen(t, TCPConfig{Name: "b", Peers: known})
	a.AddPeer("b", b2.Addr())
	sendUntil(t, a, b2, seqEnv("b", 2))
}

func TestListenTCPErrors(t *testing.T) {
	_, err := ListenTCP(TCPConfig{Addr: "127.0.0.1:0"})
	require.Error(t, err, "a name is required")
	_, err = ListenTCP(TCPConfig{Name: "a", Addr: "256.0.0.1:0"})
	require.Error(t, err)
}
