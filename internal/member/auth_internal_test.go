package member

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClientAuthFollowsReloadedCA: with a client secret and a members'
// TLS that reloads its CA (TLSFiles), the client port trusts the CA in
// use at each handshake, as before credentials existed.
func TestClientAuthFollowsReloadedCA(t *testing.T) {
	type ca struct {
		cert *x509.Certificate
		key  ed25519.PrivateKey
	}
	newCA := func(name string) ca {
		pub, key, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
		require.NoError(t, err)
		cert, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		return ca{cert, key}
	}
	leafOf := func(c ca, name string) tls.ConnectionState {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, pub, c.key)
		require.NoError(t, err)
		leaf, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		return tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	}
	oldCA, newCAx := newCA("old"), newCA("new")
	var cur atomic.Pointer[x509.CertPool]
	pool := x509.NewCertPool()
	pool.AddCert(oldCA.cert)
	cur.Store(pool)
	member := &tls.Config{ClientCAs: pool, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{ClientCAs: cur.Load()}, nil
	}}
	cfg := &Config{Name: "m0", TLS: member, ClientSecret: make([]byte, 32)}
	a := newClientAuth(cfg, slog.New(slog.DiscardHandler))

	id, gen, err := a.authenticate(leafOf(oldCA, "w1"))
	require.NoError(t, err)
	require.Equal(t, "w1", id)
	require.Zero(t, gen)
	_, _, err = a.authenticate(leafOf(newCAx, "w2"))
	require.ErrorIs(t, err, errClientCert)

	pool = x509.NewCertPool()
	pool.AddCert(newCAx.cert)
	cur.Store(pool)
	id, _, err = a.authenticate(leafOf(newCAx, "w2"))
	require.NoError(t, err, "the port still trusts the CA as of Open")
	require.Equal(t, "w2", id)
	_, _, err = a.authenticate(leafOf(oldCA, "w1"))
	require.ErrorIs(t, err, errClientCert, "the port still trusts the CA taken out")
}
