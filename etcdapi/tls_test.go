package etcdapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// selfSigned is a CA-less certificate for 127.0.0.1, usable by both
// ends (the client presents it too).
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcdapi-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestTLS: with WithTLS and client certificates required, a client with
// the certificate is served and one without is not.
func TestTLS(t *testing.T) {
	c := coordtest.NewCluster(t, 1)
	cert, pool := selfSigned(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, c.Node(0), l, WithTLS(&tls.Config{Certificates: []tls.Certificate{cert},
			ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}))
	}()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()
	ep := []string{l.Addr().String()}
	good, err := clientv3.New(clientv3.Config{Endpoints: ep, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}})
	require.NoError(t, err)
	defer good.Close()
	_, err = good.Put(tctx(t), "k", "v")
	require.NoError(t, err)

	bad, err := clientv3.New(clientv3.Config{Endpoints: ep, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool}})
	require.NoError(t, err)
	defer bad.Close()
	bctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = bad.Get(bctx, "k")
	require.Error(t, err, "no client certificate, no service")
}
