package transport

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireNothingReceived checks that no intruder's envelope is waiting
// in ch. Readers refuse a frame before delivering it, so once the
// connection is hung up, anything of it that got through would already
// be there. Members' traffic in these tests is seqEnv's (4 bytes of
// data), possibly late copies from sendUntil's retries: it is skipped.
func requireNothingReceived(t *testing.T, ch <-chan Envelope) {
	t.Helper()
	for {
		select {
		case env := <-ch:
			require.Len(t, env.Data, 4, "unexpected delivery from %q: %q", env.From, env.Data)
		default:
			return
		}
	}
}

// waitRefused waits until tr has refused more than n connections in all.
func waitRefused(t *testing.T, tr *TCP, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return tr.refused.Load() > n }, waitFor, time.Millisecond)
}

func TestTCPForgedFromOverPlaintext(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"b": "127.0.0.1:1", "c": "127.0.0.1:1"}})
	c := rawConn(t, a.Addr())
	_, err := c.Write(frameBytes(t, "b", "a", []byte("from b")))
	require.NoError(t, err)
	env := recvOne(t, a.Receive())
	assert.Equal(t, "b", env.From)
	// The connection is b's now: a frame claiming another member ends it.
	_, err = c.Write(frameBytes(t, "c", "a", []byte("claims c")))
	require.NoError(t, err)
	requireHungUp(t, c)
	requireNothingReceived(t, a.Receive())
}

func TestTCPUnknownSenderRefused(t *testing.T) {
	var logs logBuffer
	a := listen(t, TCPConfig{Name: "a", Peers: map[string]string{"b": "127.0.0.1:1"}, Logger: logs.logger()})
	c := rawConn(t, a.Addr())
	_, err := c.Write(frameBytes(t, "mallory", "a", []byte("let me in")))
	require.NoError(t, err)
	requireHungUp(t, c)
	requireNothingReceived(t, a.Receive())
	assert.True(t, logs.contains("unknown peer"), logs.String())
}

func TestTCPMutualTLSBindsCertificateName(t *testing.T) {
	ca := newTestCA(t)
	a := listen(t, TCPConfig{Name: "a", TLS: ca.mtls(t, "a"), Peers: map[string]string{"c": "127.0.0.1:1"}})
	b := listen(t, TCPConfig{Name: "b", TLS: ca.mtls(t, "b"), Peers: map[string]string{"a": a.Addr()}})
	a.AddPeer("b", b.Addr())
	sendUntil(t, b, a, seqEnv("a", 1))

	dialAs := func(t *testing.T, cert string) *tls.Conn {
		cfg := ca.mtls(t, cert)
		c, err := tls.Dial("tcp", a.Addr(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	cases := []struct{ name, cert, from string }{
		{"member certificate claiming another member", "b", "c"},
		{"valid certificate for a non-member", "mallory", "mallory"},
		{"non-member certificate claiming a member", "mallory", "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refused := a.refused.Load()
			c := dialAs(t, tc.cert)
			_, _ = c.Write(frameBytes(t, tc.from, "a", []byte("let me in")))
			requireHungUp(t, c)
			waitRefused(t, a, refused)
			requireNothingReceived(t, a.Receive())
		})
	}

	t.Run("impostor transport", func(t *testing.T) {
		// A whole transport named b, with a CA-signed certificate for
		// another name.
		refused := a.refused.Load()
		m := listen(t, TCPConfig{Name: "b", TLS: ca.mtls(t, "mallory"), Peers: map[string]string{"a": a.Addr()}})
		require.NoError(t, m.Send([]Envelope{{To: "a", Data: []byte("let me in")}}))
		waitRefused(t, a, refused)
		requireNothingReceived(t, a.Receive())
	})

	// The real b is still heard.
	sendUntil(t, b, a, seqEnv("a", 2))
}

func TestTCPDialChecksServerName(t *testing.T) {
	ca := newTestCA(t)
	var logs logBuffer
	c := listen(t, TCPConfig{Name: "c", TLS: ca.mtls(t, "c")})
	// a believes b lives where c does: c's certificate is valid for the
	// address and signed by the CA, but it does not name b.
	a := listen(t, TCPConfig{Name: "a", TLS: ca.mtls(t, "a"), Logger: logs.logger(),
		Peers: map[string]string{"b": c.Addr()}})
	c.AddPeer("a", a.Addr())
	require.NoError(t, a.Send([]Envelope{{To: "b", Data: []byte("for b only")}}))
	require.Eventually(t, func() bool { return logs.contains("does not name") }, waitFor, time.Millisecond)
	requireNothingReceived(t, c.Receive())
}

func TestTCPCustomVerifyPeer(t *testing.T) {
	ca := newTestCA(t)
	// Certificates name members as "node-<name>".
	verify := func(name string, leaf *x509.Certificate) error {
		return DefaultVerifyPeer("node-"+name, leaf)
	}
	a := listen(t, TCPConfig{Name: "a", TLS: ca.mtls(t, "node-a"), VerifyPeer: verify})
	b := listen(t, TCPConfig{Name: "b", TLS: ca.mtls(t, "node-b"), VerifyPeer: verify})
	connect(map[string]*TCP{"a": a, "b": b})
	sendUntil(t, a, b, seqEnv("b", 1))
	sendUntil(t, b, a, seqEnv("a", 2))
}

func TestTCPRemovePeer(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a"})
	b := listen(t, TCPConfig{Name: "b"})
	c := listen(t, TCPConfig{Name: "c"})
	connect(map[string]*TCP{"a": a, "b": b, "c": c})
	sendUntil(t, b, a, seqEnv("a", 1))

	refused := a.refused.Load()
	a.RemovePeer("b")
	a.mu.RLock()
	assert.Empty(t, a.inbound["b"], "b's connections must be cut")
	a.mu.RUnlock()
	// b redials, and is refused from its first frame.
	require.Eventually(t, func() bool {
		require.NoError(t, b.Send([]Envelope{seqEnv("a", 2)}))
		return a.refused.Load() > refused
	}, waitFor, 10*time.Millisecond)
	// a no longer sends to b either.
	require.NoError(t, a.Send([]Envelope{seqEnv("b", 3)}))
	// Nothing from b got through since the refusal: c's marker comes
	// alone, after any of b's frames delivered before the removal.
	require.NoError(t, c.Send([]Envelope{seqEnv("a", 4)}))
	for {
		env := recvOne(t, a.Receive())
		if env.From == "c" {
			break
		}
		require.Less(t, seqOf(t, env), 2, "b's frame after its removal")
	}

	// Added again, b is heard again.
	a.AddPeer("b", b.Addr())
	sendUntil(t, b, a, seqEnv("a", 5))
}

func TestDefaultVerifyPeer(t *testing.T) {
	u, err := url.Parse("spiffe://cell/a")
	require.NoError(t, err)
	leaf := &x509.Certificate{DNSNames: []string{"dns-a"}, URIs: []*url.URL{u}}
	leaf.Subject.CommonName = "cn-a"
	for _, name := range []string{"dns-a", "spiffe://cell/a", "cn-a"} {
		assert.NoError(t, DefaultVerifyPeer(name, leaf), name)
	}
	for _, name := range []string{"", "a", "dns", "cell"} {
		assert.ErrorIs(t, DefaultVerifyPeer(name, leaf), ErrPeerIdentity, name)
	}
}

func testSecret(b byte) []byte { return bytes.Repeat([]byte{b}, MinSecretLen) }

func TestSecretTLS(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a", Secret: testSecret(1)})
	b := listen(t, TCPConfig{Name: "b", Secret: testSecret(1)})
	connect(map[string]*TCP{"a": a, "b": b})
	sendUntil(t, a, b, seqEnv("b", 1))
	sendUntil(t, b, a, seqEnv("a", 2))

	t.Run("another secret", func(t *testing.T) {
		// Calls itself b, a known member, but holds another secret.
		refused := a.refused.Load()
		m := listen(t, TCPConfig{Name: "b", Secret: testSecret(2), Peers: map[string]string{"a": a.Addr()}})
		require.NoError(t, m.Send([]Envelope{{To: "a", Data: []byte("let me in")}}))
		waitRefused(t, a, refused)
		requireNothingReceived(t, a.Receive())
	})

	t.Run("same secret, not a member", func(t *testing.T) {
		refused := a.refused.Load()
		m := listen(t, TCPConfig{Name: "mallory", Secret: testSecret(1), Peers: map[string]string{"a": a.Addr()}})
		require.NoError(t, m.Send([]Envelope{{To: "a", Data: []byte("let me in")}}))
		waitRefused(t, a, refused)
		requireNothingReceived(t, a.Receive())
	})

	t.Run("deterministic CA", func(t *testing.T) {
		one, err := SecretTLS(testSecret(3), "x")
		require.NoError(t, err)
		two, err := SecretTLS(testSecret(3), "y")
		require.NoError(t, err)
		other, err := SecretTLS(testSecret(4), "z")
		require.NoError(t, err)
		leaf := one.Certificates[0].Leaf
		_, err = leaf.Verify(x509.VerifyOptions{Roots: two.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		require.NoError(t, err, "the same secret makes the same CA")
		_, err = leaf.Verify(x509.VerifyOptions{Roots: other.RootCAs})
		require.Error(t, err)
		assert.NotEqual(t, leaf.PublicKey, two.Certificates[0].Leaf.PublicKey, "leaf keys are per process")
		require.NoError(t, DefaultVerifyPeer("x", leaf))
	})

	t.Run("plain tls.Dial with the member's name", func(t *testing.T) {
		cfg, err := SecretTLS(testSecret(1), "a")
		require.NoError(t, err)
		cfg.ServerName = "b"
		c, err := tls.Dial("tcp", b.Addr(), cfg)
		require.NoError(t, err)
		c.Close()
	})
}

func TestListenTCPSecurityConfig(t *testing.T) {
	_, err := ListenTCP(TCPConfig{Name: "a", Addr: "127.0.0.1:0", Secret: make([]byte, MinSecretLen-1)})
	require.ErrorIs(t, err, ErrWeakSecret)
	_, err = ListenTCP(TCPConfig{Name: "a", Addr: "127.0.0.1:0", Secret: []byte{}})
	require.ErrorIs(t, err, ErrWeakSecret)
	_, err = SecretTLS(nil, "a")
	require.ErrorIs(t, err, ErrWeakSecret)

	ca := newTestCA(t)
	_, err = ListenTCP(TCPConfig{Name: "a", Addr: "127.0.0.1:0", Secret: testSecret(1), TLS: ca.mtls(t, "a")})
	require.ErrorIs(t, err, ErrConfig)
	serverOnly := ca.mtls(t, "a")
	serverOnly.ClientAuth = tls.VerifyClientCertIfGiven
	_, err = ListenTCP(TCPConfig{Name: "a", Addr: "127.0.0.1:0", TLS: serverOnly})
	require.ErrorIs(t, err, ErrConfig)
}

func TestTCPPlaintextWarning(t *testing.T) {
	var plain, secret logBuffer
	listen(t, TCPConfig{Name: "a", Logger: plain.logger()})
	listen(t, TCPConfig{Name: "b", Secret: testSecret(1), Logger: secret.logger()})
	assert.Equal(t, 1, strings.Count(plain.String(), "level=WARN msg=\"transport: no TLS or Secret: frames are not authenticated"), plain.String())
	assert.Contains(t, plain.String(), "firewall")
	assert.NotContains(t, secret.String(), "not authenticated")
}

// A sender that is not a known peer gets through only past the stranger
// gate, with its name still proven by its certificate; the address it
// is then answered at is dialled only if the server there proves the
// name too; RemovePeer cuts it like any peer.
func TestTCPStrangerGate(t *testing.T) {
	ca := newTestCA(t)
	var logs logBuffer
	a := listen(t, TCPConfig{Name: "a", TLS: ca.mtls(t, "a"), Logger: logs.logger()})
	a.AdmitStrangers(func(name string) bool { return name == "d" })
	d := listen(t, TCPConfig{Name: "d", TLS: ca.mtls(t, "d"), Peers: map[string]string{"a": a.Addr()}})
	sendUntil(t, d, a, seqEnv("a", 1))

	for _, tc := range []struct{ name, cert, from string }{
		{"a name the gate refuses", "mallory", "mallory"},
		{"a certificate for another name", "mallory", "d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused := a.refused.Load()
			c, err := tls.Dial("tcp", a.Addr(), ca.mtls(t, tc.cert))
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			_, _ = c.Write(frameBytes(t, tc.from, "a", []byte("let me in")))
			requireHungUp(t, c)
			waitRefused(t, a, refused)
			requireNothingReceived(t, a.Receive())
		})
	}

	// An address that lies: the server there is c, whose certificate
	// does not name d, so nothing meant for d reaches it.
	c := listen(t, TCPConfig{Name: "c", TLS: ca.mtls(t, "c"), Peers: map[string]string{"a": a.Addr()}})
	a.AddPeer("d", c.Addr())
	require.NoError(t, a.Send([]Envelope{{To: "d", Data: []byte("for d only")}}))
	require.Eventually(t, func() bool { return logs.contains("does not name") }, waitFor, time.Millisecond)
	requireNothingReceived(t, c.Receive())
	// The true one: a answers d.
	a.AddPeer("d", d.Addr())
	sendUntil(t, a, d, seqEnv("d", 2))

	// Without the gate, and no longer a peer, d is refused again.
	a.AdmitStrangers(nil)
	a.RemovePeer("d")
	refused := a.refused.Load()
	require.Eventually(t, func() bool {
		_ = d.Send([]Envelope{seqEnv("a", 3)})
		return a.refused.Load() > refused
	}, waitFor, 10*time.Millisecond)
	requireNothingReceived(t, a.Receive())
}
