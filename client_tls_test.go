package coord_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
)

// identities records the identities a ClientPolicy was asked about.
type identities struct {
	mu   sync.Mutex
	seen []string
}

func (ids *identities) policy(identity string) (coord.ClientGrant, error) {
	ids.mu.Lock()
	ids.seen = append(ids.seen, identity)
	ids.mu.Unlock()
	return coord.ClientGrant{WritePrefixes: []string{""}}, nil
}

func (ids *identities) all() []string {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	return append([]string(nil), ids.seen...)
}

func clientAddrs(c *coordtest.Cluster) []string {
	var out []string
	for i := range c.Size() {
		out = append(out, c.Node(i).Admin().ClientAddr())
	}
	return out
}

// TestClientSecret: a client holding the client secret authenticates as
// the name it chose; one with another secret is refused, errors.Is-able.
func TestClientSecret(t *testing.T) {
	t.Parallel()
	memberSecret := bytes.Repeat([]byte{1}, 32)
	clientSecret := bytes.Repeat([]byte{2}, 32)
	var ids identities
	c := serveCluster(t, 3, func(_ int, cfg *coord.Config) {
		cfg.Secret, cfg.ClientSecret, cfg.ClientPolicy = memberSecret, clientSecret, ids.policy
	})
	ctx := ctxT(t, 20*time.Second)
	cl, err := coord.Connect(ctx, coord.ClientConfig{Name: "alice", Members: clientAddrs(c), Secret: clientSecret})
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, ids.all())

	for name, secret := range map[string][]byte{
		"another secret": bytes.Repeat([]byte{3}, 32),
		// The member secret is not the client secret when both are set.
		"the member secret": memberSecret,
	} {
		_, err := coord.Connect(ctx, coord.ClientConfig{Name: "mallory", Members: clientAddrs(c), Secret: secret})
		require.ErrorIs(t, err, coord.ErrUnauthenticated, name)
		require.ErrorIs(t, err, coord.ErrNoQuorum, name)
	}
	require.Equal(t, []string{"alice"}, ids.all(), "no refused client reached the policy")

	_, err = coord.Connect(ctx, coord.ClientConfig{Name: "bob", Members: clientAddrs(c), Secret: []byte("short")})
	require.ErrorIs(t, err, coord.ErrInvalidConfig)
}

// TestClientSecretFromMemberSecret: without a client secret, clients use
// the member secret, and still get a client certificate, not a member's.
func TestClientSecretFromMemberSecret(t *testing.T) {
	t.Parallel()
	secret := bytes.Repeat([]byte{4}, 32)
	var ids identities
	c := serveCluster(t, 1, func(_ int, cfg *coord.Config) { cfg.Secret, cfg.ClientPolicy = secret, ids.policy })
	ctx := ctxT(t, 20*time.Second)
	cl, err := coord.Connect(ctx, coord.ClientConfig{Name: "carol", Members: clientAddrs(c), Secret: secret})
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.Get(ctx, "nothing")
	require.ErrorIs(t, err, coord.ErrNotFound)
	require.Equal(t, []string{"carol"}, ids.all())
}

func TestClientSecretConfigChecked(t *testing.T) {
	t.Parallel()
	_, err := coord.Open(context.Background(), coord.Config{Name: "a", Peers: []coord.Peer{{Name: "a", Addr: "127.0.0.1:0"}},
		ClientSecret: []byte("too short")})
	require.ErrorIs(t, err, coord.ErrInvalidConfig)
}

// TestClientSecretRefusedByMembers: a certificate from the client secret
// does not pass for a member, even when the client secret is the
// members' own.
func TestClientSecretRefusedByMembers(t *testing.T) {
	t.Parallel()
	secret := bytes.Repeat([]byte{5}, 32)
	_, peers := tcpCell(t, func(c *coord.Config) { c.Secret, c.ClientSecret = secret, secret })
	tc, err := transport.ClientSecretTLS(secret, peers[1].Name)
	require.NoError(t, err)
	tc.InsecureSkipVerify = true // only the member's verdict on us matters here
	conn, err := tls.Dial("tcp", peers[0].Addr, tc)
	if err == nil {
		defer conn.Close()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
		_, err = conn.Read(make([]byte, 1))
	}
	var ne net.Error
	require.Error(t, err)
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the member did not refuse the certificate: %v", err)
}

// testCA is a CA for tests, issuing certificates for one name each.
type testCA struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// config is a mutual TLS configuration for name (a DNS SAN).
func (ca *testCA) config(t *testing.T, name string) *tls.Config {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	require.NoError(t, err)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs: ca.pool, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

// TestClientTLS: members and clients with certificates of one CA; a
// client is known by its certificate's name, and its sessions are its
// own: another client cannot end them.
func TestClientTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	nodes, _ := tcpCell(t, func(c *coord.Config) {
		c.TLS = ca.config(t, c.Name)
		c.ClientAddr = "127.0.0.1:0"
	})
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Admin().ClientAddr())
	}
	ctx := ctxT(t, 30*time.Second)
	w1, err := coord.Connect(ctx, coord.ClientConfig{Name: "worker-1", Members: addrs, TLS: ca.config(t, "worker-1")})
	require.NoError(t, err)
	defer w1.Close()
	s, err := w1.NewSession(ctx)
	require.NoError(t, err)
	tok, err := coord.NewMutex(s, "jobs").Lock(ctx)
	require.NoError(t, err)
	require.Positive(t, int64(tok))

	// worker-2 speaks the protocol directly, to name worker-1's session.
	w2cfg := ca.config(t, "worker-2")
	w2cfg.ServerName = nodes[0].Status().Name
	raw, err := tls.Dial("tcp", addrs[0], w2cfg)
	require.NoError(t, err)
	w2, err := clientwire.Handshake(ctx, raw, clientwire.ClientOptions{Name: "worker-2"})
	require.NoError(t, err)
	defer w2.Close()
	end, err := command.Encode(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: int64(s.ID())}})
	require.NoError(t, err)
	_, err = w2.Propose(ctx, end)
	require.Equal(t, clientwire.CodeForbidden, wireCode(err), "worker-2 ended worker-1's session: %v", err)
	select {
	case <-s.Done():
		t.Fatalf("worker-1's session ended: %v", s.Err())
	default:
	}
	// worker-1 may end its own session: it owns it as "client:worker-1".
	require.NoError(t, s.Close(ctx))

	// A client whose certificate is of another CA is refused.
	_, err = coord.Connect(ctx, coord.ClientConfig{Name: "worker-3", Members: addrs, TLS: newTestCA(t).config(t, "worker-3")})
	require.ErrorIs(t, err, coord.ErrUnauthenticated)
}

// TestClientSecretWithTLS: members with a PKI and a client secret take
// clients of either kind; a PKI client trusts the client CA to verify
// the member.
func TestClientSecretWithTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	clientSecret := bytes.Repeat([]byte{6}, 32)
	var ids identities
	nodes, _ := tcpCell(t, func(c *coord.Config) {
		c.TLS, c.ClientSecret, c.ClientPolicy = ca.config(t, c.Name), clientSecret, ids.policy
		c.ClientAddr = "127.0.0.1:0"
	})
	addrs := []string{nodes[0].Admin().ClientAddr()}
	ctx := ctxT(t, 30*time.Second)
	bySecret, err := coord.Connect(ctx, coord.ClientConfig{Name: "by-secret", Members: addrs, Secret: clientSecret})
	require.NoError(t, err)
	defer bySecret.Close()
	_, err = bySecret.Put(ctx, "a", []byte("1"))
	require.NoError(t, err)

	clientCA, err := transport.ClientSecretCA(clientSecret)
	require.NoError(t, err)
	pki := ca.config(t, "by-pki")
	pki.RootCAs = pki.RootCAs.Clone()
	pki.RootCAs.AddCert(clientCA)
	byPKI, err := coord.Connect(ctx, coord.ClientConfig{Name: "by-pki", Members: addrs, TLS: pki})
	require.NoError(t, err)
	defer byPKI.Close()
	_, err = byPKI.Put(ctx, "b", []byte("2"))
	require.NoError(t, err)
	require.Equal(t, []string{"by-secret", "by-pki"}, ids.all())
}
