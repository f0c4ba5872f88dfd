package transport

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClientCredentialText(t *testing.T) {
	c, err := IssueClientCredential(testSecret(1), "worker-ü", 3)
	require.NoError(t, err)
	again, err := IssueClientCredential(testSecret(1), "worker-ü", 3)
	require.NoError(t, err)
	require.Equal(t, c, again, "issuing is deterministic")
	text := c.Text()
	require.True(t, strings.HasPrefix(text, "coord-client-1:"))
	got, err := ParseClientCredential("  " + text + "\n")
	require.NoError(t, err)
	require.Equal(t, c, got)
	require.NotContains(t, c.String(), text[len("coord-client-1:"):len("coord-client-1:")+20], "String reveals the key")
	require.Contains(t, c.String(), "worker-ü")

	for _, other := range []struct {
		secret []byte
		name   string
		gen    uint64
	}{{testSecret(2), "worker-ü", 3}, {testSecret(1), "worker-u", 3}, {testSecret(1), "worker-ü", 4}} {
		o, err := IssueClientCredential(other.secret, other.name, other.gen)
		require.NoError(t, err)
		require.NotEqual(t, c.key, o.key, "%v", other)
	}

	for name, bad := range map[string]string{
		"empty": "", "no prefix": text[len("coord-client-1:"):], "other format": "coord-client-2:" + text[len("coord-client-1:"):],
		"truncated": text[:len(text)-2], "extended": text + "AA", "not base64": "coord-client-1:%%%%",
	} {
		_, err := ParseClientCredential(bad)
		require.ErrorIs(t, err, ErrClientCredential, name)
	}

	_, err = IssueClientCredential(testSecret(1)[:MinSecretLen-1], "w", 1)
	require.ErrorIs(t, err, ErrWeakSecret)
	for name, bad := range map[string]struct {
		name string
		gen  uint64
	}{"no name": {"", 1}, "long name": {strings.Repeat("n", MaxClientNameLen+1), 1}, "not UTF-8": {"\xff", 1}, "generation 0": {"w", 0}} {
		_, err = IssueClientCredential(testSecret(1), bad.name, bad.gen)
		require.ErrorIs(t, err, ErrConfig, name)
	}
}

// selfSigned makes a certificate of key for tmpl, signed by key itself,
// as a client forging a credential would.
func selfSigned(t *testing.T, key ed25519.PrivateKey, tmpl *x509.Certificate) *x509.Certificate {
	t.Helper()
	if tmpl.NotAfter.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return leaf
}

// TestClientVerifierRefusesForgeries: holding alice's credential lets
// one make a certificate for any name or generation with alice's key,
// but the verifier takes none of them for anyone, alice included in
// another generation; only alice's own certificate passes.
func TestClientVerifierRefusesForgeries(t *testing.T) {
	v, err := NewClientVerifier(testSecret(1))
	require.NoError(t, err)
	alice, err := IssueClientCredential(testSecret(1), "alice", 1)
	require.NoError(t, err)
	cert, err := alice.certificate()
	require.NoError(t, err)
	name, gen, err := v.Verify(cert.Leaf)
	require.NoError(t, err)
	require.Equal(t, "alice", name)
	require.EqualValues(t, 1, gen)
	require.True(t, IsClientCredentialCert(cert.Leaf))
	name, gen, err = v.VerifyText(alice.Text())
	require.NoError(t, err)
	require.Equal(t, "alice", name)
	require.EqualValues(t, 1, gen)

	key := cert.PrivateKey.(ed25519.PrivateKey)
	unit := []string{credentialUnit}
	for what, tmpl := range map[string]*x509.Certificate{
		"bob":                 {SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bob", OrganizationalUnit: unit}},
		"alice, generation 2": {SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "alice", OrganizationalUnit: unit}},
		"alice naming bob":    {SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice"}, DNSNames: []string{"bob"}},
		"alice, generation 0": {SerialNumber: big.NewInt(0), Subject: pkix.Name{CommonName: "alice"}},
		"alice, no name":      {SerialNumber: big.NewInt(1)},
	} {
		_, _, err := v.Verify(selfSigned(t, key, tmpl))
		require.ErrorIs(t, err, ErrClientCredential, what)
	}
	other, err := NewClientVerifier(testSecret(2))
	require.NoError(t, err)
	_, _, err = other.Verify(cert.Leaf)
	require.ErrorIs(t, err, ErrClientCredential, "another cell's verifier")
	_, _, err = other.VerifyText(alice.Text())
	require.ErrorIs(t, err, ErrClientCredential)

	// A text naming bob with alice's key is not bob's.
	forged := alice
	forged.Name = "bob"
	_, _, err = v.VerifyText(forged.Text())
	require.ErrorIs(t, err, ErrClientCredential)
}

// TestClientCredentialTLS: a handshake between a credential's TLS and a
// server that verifies credentials, with a member certificate of the
// client CA; a server of another cell is refused by the client.
func TestClientCredentialTLS(t *testing.T) {
	alice, err := IssueClientCredential(testSecret(1), "alice", 1)
	require.NoError(t, err)
	v, err := NewClientVerifier(testSecret(1))
	require.NoError(t, err)
	serve := func(secret []byte, listCAs bool) (string, chan error) {
		server, err := ClientSecretTLS(secret, "n0")
		require.NoError(t, err)
		server.ClientAuth = tls.RequireAnyClientCert
		if !listCAs {
			server.ClientCAs = nil
		}
		server.VerifyConnection = func(cs tls.ConnectionState) error {
			_, _, err := v.Verify(cs.PeerCertificates[0])
			return err
		}
		l, err := tls.Listen("tcp", "127.0.0.1:0", server)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		done := make(chan error, 1)
		go func() {
			c, err := l.Accept()
			if err == nil {
				err = c.(*tls.Conn).Handshake()
				c.Close()
			}
			done <- err
		}()
		return l.Addr().String(), done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tc, err := alice.TLS()
	require.NoError(t, err)
	for _, listCAs := range []bool{false, true} {
		addr, done := serve(testSecret(1), listCAs)
		c, err := (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", addr)
		require.NoError(t, err)
		c.Close()
		require.NoError(t, <-done, "the server lists CAs: %v", listCAs)
	}

	addr, done := serve(testSecret(2), false)
	_, err = (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", addr)
	require.ErrorIs(t, err, ErrPeerIdentity, "the client accepted another cell's member")
	<-done

	certPEM, keyPEM, err := alice.CertificatePEM()
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	_, _, err = v.Verify(leaf)
	require.NoError(t, err, "the PEM files are the credential's certificate")
}

// BenchmarkClientVerifierVerify is what a member adds to each client
// handshake that presents a credential.
func BenchmarkClientVerifierVerify(b *testing.B) {
	v, err := NewClientVerifier(testSecret(1))
	require.NoError(b, err)
	c, err := IssueClientCredential(testSecret(1), "alice", 1)
	require.NoError(b, err)
	cert, err := c.certificate()
	require.NoError(b, err)
	for b.Loop() {
		if _, _, err := v.Verify(cert.Leaf); err != nil {
			b.Fatal(err)
		}
	}
}
