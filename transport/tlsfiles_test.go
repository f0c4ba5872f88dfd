package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memberFiles are one member's PEM files in a directory of its own.
type memberFiles struct {
	dir string
	TLSFiles
}

func newMemberFiles(t *testing.T) memberFiles {
	dir := t.TempDir()
	return memberFiles{dir: dir, TLSFiles: TLSFiles{
		CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}}
}

// put writes a file as rotation tools do: a new file renamed over the
// old one.
func put(t *testing.T, path string, blocks ...*pem.Block) {
	t.Helper()
	var data []byte
	for _, b := range blocks {
		data = append(data, pem.EncodeToMemory(b)...)
	}
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func caPEM(ca *testCA) *pem.Block { return &pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw} }

// issueFiles issues a certificate for name with the given usages and
// writes it and its key.
func (m memberFiles) issue(t *testing.T, ca *testCA, name string, usages ...x509.ExtKeyUsage) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	put(t, m.Key, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	put(t, m.Cert, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	return serial
}

var bothUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// handshake connects a client with config cc to a server with config sc
// and returns the serials each saw of the other's certificate.
func handshake(t *testing.T, sc, cc *tls.Config, serverName string) (clientSaw, serverSaw *big.Int, err error) {
	t.Helper()
	// A loopback connection, not net.Pipe: its buffers take the session
	// ticket the server writes after the client's handshake is done.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	b, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer b.Close()
	a, err := ln.Accept()
	require.NoError(t, err)
	defer a.Close()
	cc = cc.Clone()
	cc.ServerName = serverName
	srv, cli := tls.Server(a, sc), tls.Client(b, cc)
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() {
		serr = srv.Handshake()
		if serr != nil {
			b.Close() // the client may wait for a message that never comes
		}
	})
	cerr := cli.Handshake()
	if cerr != nil {
		a.Close()
	}
	wg.Wait()
	if cerr != nil || serr != nil {
		return nil, nil, errorsJoin(cerr, serr)
	}
	return cli.ConnectionState().PeerCertificates[0].SerialNumber,
		srv.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func errorsJoin(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func TestTLSFilesReloadAfterRotation(t *testing.T) {
	ca1, ca2 := newTestCA(t), newTestCA(t)
	a, b := newMemberFiles(t), newMemberFiles(t)
	put(t, a.CA, caPEM(ca1))
	put(t, b.CA, caPEM(ca1))
	aSerial := a.issue(t, ca1, "a", bothUsages...)
	bSerial := b.issue(t, ca1, "b", bothUsages...)
	var reloads []error
	a.OnReload = func(err error) { reloads = append(reloads, err) }
	ac, err := a.Config("a")
	require.NoError(t, err)
	bc, err := b.Config("b")
	require.NoError(t, err)

	clientSaw, serverSaw, err := handshake(t, ac, bc, "a")
	require.NoError(t, err)
	require.Equal(t, aSerial, clientSaw)
	require.Equal(t, bSerial, serverSaw)

	// New certificates for both, from the same CA: the next handshake
	// uses them on both sides, with no new config.
	aSerial = a.issue(t, ca1, "a", bothUsages...)
	bSerial = b.issue(t, ca1, "b", bothUsages...)
	clientSaw, serverSaw, err = handshake(t, ac, bc, "a")
	require.NoError(t, err)
	require.Equal(t, aSerial, clientSaw, "the server presents its new certificate")
	require.Equal(t, bSerial, serverSaw, "the client presents its new certificate")
	require.Equal(t, []error{nil}, reloads)

	// A new CA: a trusts both while b moves to a certificate of the new
	// one, which a accepts as a server.
	put(t, a.CA, caPEM(ca1), caPEM(ca2))
	put(t, b.CA, caPEM(ca1), caPEM(ca2))
	bSerial = b.issue(t, ca2, "b", bothUsages...)
	_, serverSaw, err = handshake(t, ac, bc, "a")
	require.NoError(t, err)
	require.Equal(t, bSerial, serverSaw)
	// The current CA pool is there for a dialer that verifies servers
	// itself.
	cur, err := ac.GetConfigForClient(nil)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(must(bc.GetClientCertificate(nil)).Certificate[0])
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: cur.RootCAs})
	require.NoError(t, err)

	// Dropping the old CA from a's file: a refuses a client still on it.
	b.issue(t, ca1, "b", bothUsages...)
	put(t, a.CA, caPEM(ca2))
	a.issue(t, ca2, "a", bothUsages...)
	_, _, err = handshake(t, ac, bc, "a")
	require.Error(t, err)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestTLSFilesServerOnlyCertificate(t *testing.T) {
	ca := newTestCA(t)
	m := newMemberFiles(t)
	put(t, m.CA, caPEM(ca))
	m.issue(t, ca, "a", x509.ExtKeyUsageServerAuth)
	_, err := m.Config("a")
	require.ErrorIs(t, err, ErrCertUsage)
	require.ErrorContains(t, err, "clientAuth")

	// Rotated in later, it is refused and the good certificate stays.
	good := m.issue(t, ca, "a", bothUsages...)
	var reloads []error
	m.OnReload = func(err error) { reloads = append(reloads, err) }
	cfg, err := m.Config("a")
	require.NoError(t, err)
	m.issue(t, ca, "a", x509.ExtKeyUsageServerAuth)
	cert, err := cfg.GetClientCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, good, must(x509.ParseCertificate(cert.Certificate[0])).SerialNumber)
	require.Len(t, reloads, 1)
	require.ErrorIs(t, reloads[0], ErrCertUsage)

	// A peer that presents a server-only certificate as a client is
	// refused by the handshake too.
	other := newMemberFiles(t)
	put(t, other.CA, caPEM(ca))
	other.issue(t, ca, "b", x509.ExtKeyUsageServerAuth)
	raw, err := tls.LoadX509KeyPair(other.Cert, other.Key)
	require.NoError(t, err)
	cc := &tls.Config{Certificates: []tls.Certificate{raw}, RootCAs: ca.pool, MinVersion: tls.VersionTLS13}
	m.issue(t, ca, "a", bothUsages...)
	_, _, err = handshake(t, cfg, cc, "a")
	require.Error(t, err)
}

func TestTLSFilesRefusesBadFiles(t *testing.T) {
	ca, stranger := newTestCA(t), newTestCA(t)
	m := newMemberFiles(t)
	put(t, m.CA, caPEM(ca))
	m.issue(t, ca, "a", bothUsages...)

	_, err := m.Config("b")
	require.ErrorIs(t, err, ErrPeerIdentity, "a certificate must name its member")
	_, err = TLSFiles{CA: m.CA, Cert: m.Cert}.Config("a")
	require.ErrorIs(t, err, ErrConfig)

	// A key that is not the certificate's.
	key, err := os.ReadFile(m.Key)
	require.NoError(t, err)
	m.issue(t, ca, "a", bothUsages...)
	require.NoError(t, os.WriteFile(m.Key, key, 0o600))
	_, err = m.Config("a")
	require.ErrorIs(t, err, ErrConfig)

	// A certificate from a CA that is not in the CA file.
	m.issue(t, stranger, "a", bothUsages...)
	_, err = m.Config("a")
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "not verified by the CA file")

	// An oversized file is not read.
	m.issue(t, ca, "a", bothUsages...)
	require.NoError(t, os.WriteFile(m.CA, make([]byte, maxPEMFile+1), 0o600))
	_, err = m.Config("a")
	require.ErrorIs(t, err, ErrConfig)
}

// TestTLSFilesDialerFollowsCA checks the side that dials: a member
// verifies the servers it dials against its CA file as it is now, not as
// it was when the configuration was made.
func TestTLSFilesDialerFollowsCA(t *testing.T) {
	ca1, ca2 := newTestCA(t), newTestCA(t)
	a, b := newMemberFiles(t), newMemberFiles(t)
	put(t, a.CA, caPEM(ca1))
	put(t, b.CA, caPEM(ca1), caPEM(ca2))
	a.issue(t, ca1, "a", bothUsages...)
	b.issue(t, ca1, "b", bothUsages...)
	ac, err := a.Config("a")
	require.NoError(t, err)
	bc, err := b.Config("b")
	require.NoError(t, err)
	dial := peerClientTLS(ac, "b", DefaultVerifyPeer)

	_, _, err = handshake(t, bc, dial, "b")
	require.NoError(t, err)

	// b moves to the new CA: a, which trusts only the old one, refuses it.
	b.issue(t, ca2, "b", bothUsages...)
	_, _, err = handshake(t, bc, dial, "b")
	require.Error(t, err, "a server certificate from a CA the dialer does not trust")

	// a's CA file gains the new CA: the same dial config now accepts b.
	put(t, a.CA, caPEM(ca1), caPEM(ca2))
	_, _, err = handshake(t, bc, dial, "b")
	require.NoError(t, err)
}
