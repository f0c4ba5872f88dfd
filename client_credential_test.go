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
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
)

var (
	credMemberSecret = bytes.Repeat([]byte{0x41}, 32)
	credClientSecret = bytes.Repeat([]byte{0x42}, 32)
)

// hostGrants gives each client a prefix of its own, and root the hosts.
func hostGrants(identity string) (coord.ClientGrant, error) {
	switch identity {
	case "root":
		return coord.ClientGrant{WritePrefixes: []string{"hosts/", "locks/"}}, nil
	case "alice", "bob", "carol":
		return coord.ClientGrant{WritePrefixes: []string{identity + "/", "locks/"}}, nil
	}
	return coord.ClientGrant{}, fmt.Errorf("no grant for %q", identity)
}

// credCell is a cell whose members serve clients with a client secret
// of their own, and the credentials it issued to alice, bob and root.
func credCell(t *testing.T, mod func(*coord.Config)) (*coordtest.Cluster, map[string]string) {
	t.Helper()
	c := serveCluster(t, 3, func(_ int, cfg *coord.Config) {
		cfg.Secret, cfg.ClientSecret, cfg.ClientPolicy = credMemberSecret, credClientSecret, hostGrants
		if mod != nil {
			mod(cfg)
		}
	})
	creds := map[string]string{}
	for _, name := range []string{"alice", "bob", "root"} {
		cred, err := coord.IssueClientCredential(credClientSecret, name, 1)
		require.NoError(t, err)
		creds[name] = cred
	}
	return c, creds
}

func connectCred(t *testing.T, ctx context.Context, c *coordtest.Cluster, name, cred string) (*coord.Client, error) {
	t.Helper()
	cl, err := coord.Connect(ctx, coord.ClientConfig{Name: name, Members: clientAddrs(c), Credential: cred})
	if err == nil {
		t.Cleanup(func() { cl.Close() })
	}
	return cl, err
}

// TestClientCredentialProvesOneName: a client holding only its own
// credential is that client and nobody else: it cannot connect as bob
// or root, so it can neither resume nor end bob's session, nor write
// root's keys, and its failed attempts are counted by the members.
func TestClientCredentialProvesOneName(t *testing.T) {
	t.Parallel()
	c, creds := credCell(t, nil)
	ctx := ctxT(t, 60*time.Second)
	bob, err := connectCred(t, ctx, c, "bob", creds["bob"])
	require.NoError(t, err)
	bs, err := bob.NewSession(ctx)
	require.NoError(t, err)
	bm := coord.NewMutex(bs, "jobs")
	tok, err := bm.Lock(ctx)
	require.NoError(t, err)
	root, err := connectCred(t, ctx, c, "root", creds["root"])
	require.NoError(t, err)
	_, err = root.Put(ctx, "hosts/h1", []byte("real"))
	require.NoError(t, err)

	refused := func() (n uint64) {
		for i := range c.Size() {
			n += coord.ClientCertsRefused(c.Node(i))
		}
		return n
	}
	before := refused()
	for _, name := range []string{"bob", "root"} {
		_, err := connectCred(t, ctx, c, name, creds["alice"])
		require.Error(t, err, "alice's credential connected as %s", name)
		require.True(t, errorsIsAny(err, coord.ErrInvalidConfig, coord.ErrUnauthenticated), "%s: %v", name, err)
	}
	// Past the client library: certificates of alice's key that claim to
	// be bob's or root's, in every field a name can hide in.
	aliceTLS := credTLS(t, creds["alice"])
	own, err := aliceTLS.GetClientCertificate(nil)
	require.NoError(t, err)
	key := own.PrivateKey.(ed25519.PrivateKey)
	unit := []string{"coord client credential"}
	forgeries := map[string]*x509.Certificate{
		"bob":                 {SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bob", OrganizationalUnit: unit}},
		"root, generation 2":  {SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "root", OrganizationalUnit: unit}},
		"alice's, naming bob": {SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice", OrganizationalUnit: unit}, DNSNames: []string{"bob"}},
		"bob, as from a CA":   {SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bob"}, DNSNames: []string{"bob"}},
	}
	for what, tmpl := range forgeries {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		require.NoError(t, err)
		forged := aliceTLS.Clone()
		cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
		forged.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		raw, err := dialTLS(ctx, c.Node(0).Admin().ClientAddr(), forged)
		if err == nil {
			_, err = clientwire.Handshake(ctx, raw, clientwire.ClientOptions{Name: "bob"})
			raw.Close()
		}
		require.Error(t, err, "a forged certificate (%s) was admitted", what)
	}

	// As herself, alice can do nothing to bob's session or root's keys.
	alice, err := connectCred(t, ctx, c, "", creds["alice"])
	require.NoError(t, err)
	_, err = alice.NewSession(ctx, coord.WithSessionID(bs.ID()))
	require.ErrorIs(t, err, coord.ErrForbidden)
	_, err = alice.Put(ctx, "hosts/h1", []byte("forged"))
	require.ErrorIs(t, err, coord.ErrForbidden)
	_, err = alice.Put(ctx, "bob/x", []byte("forged"))
	require.ErrorIs(t, err, coord.ErrForbidden)
	_, err = alice.Delete(ctx, bm.Key())
	require.ErrorIs(t, err, coord.ErrForbidden)
	tc := credTLS(t, creds["alice"])
	for i := range c.Size() {
		raw, err := dialTLS(ctx, c.Node(i).Admin().ClientAddr(), tc)
		require.NoError(t, err)
		// The Hello's name is not an identity under TLS.
		w, err := clientwire.Handshake(ctx, raw, clientwire.ClientOptions{Name: "bob"})
		require.NoError(t, err)
		end, err := command.Encode(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: int64(bs.ID())}})
		require.NoError(t, err)
		_, err = w.Propose(ctx, end)
		require.Equal(t, clientwire.CodeForbidden, wireCode(err), "alice ended bob's session through %s: %v", c.Node(i).Status().Name, err)
		w.Close()
	}

	select {
	case <-bs.Done():
		t.Fatalf("bob's session ended: %v", bs.Err())
	case <-bm.Done():
		t.Fatal("bob's hold ended")
	default:
	}
	kv, err := bob.Get(ctx, bm.Key())
	require.NoError(t, err)
	require.Equal(t, int64(tok), kv.CreateRev)
	kv, err = bob.Get(ctx, "hosts/h1")
	require.NoError(t, err)
	require.Equal(t, "real", string(kv.Value))
	require.NoError(t, bm.Unlock(ctx))
	require.GreaterOrEqual(t, refused()-before, uint64(len(forgeries)), "the members did not count every forged certificate")
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// credTLS is the TLS configuration a client derives from cred.
func credTLS(t *testing.T, cred string) *tls.Config {
	t.Helper()
	cc, err := transport.ParseClientCredential(cred)
	require.NoError(t, err)
	tc, err := cc.TLS()
	require.NoError(t, err)
	return tc
}

func dialTLS(ctx context.Context, addr string, tc *tls.Config) (net.Conn, error) {
	d := tls.Dialer{Config: tc}
	return d.DialContext(ctx, "tcp", addr)
}

// TestClientCredentialRevoked: a revoked credential is refused, at Open
// (Config.ClientRevoked) or while the members run (SetClientRevoked,
// which also ends the connections it admitted), while other clients,
// and the revoked client's next generation, still connect and work.
func TestClientCredentialRevoked(t *testing.T) {
	t.Parallel()
	c, creds := credCell(t, func(cfg *coord.Config) { cfg.ClientRevoked = map[string]uint64{"root": 1} })
	ctx := ctxT(t, 60*time.Second)
	_, err := connectCred(t, ctx, c, "", creds["root"])
	require.ErrorIs(t, err, coord.ErrUnauthenticated, "root's revoked generation connected")
	root2, err := coord.IssueClientCredential(credClientSecret, "root", 2)
	require.NoError(t, err)
	r, err := connectCred(t, ctx, c, "", root2)
	require.NoError(t, err)
	_, err = r.Put(ctx, "hosts/h1", []byte("v"))
	require.NoError(t, err)

	alice, err := connectCred(t, ctx, c, "", creds["alice"])
	require.NoError(t, err)
	bob, err := connectCred(t, ctx, c, "", creds["bob"])
	require.NoError(t, err)
	_, err = alice.Put(ctx, "alice/a", []byte("1"))
	require.NoError(t, err)
	before := bob.Member()
	for i := range c.Size() {
		c.Node(i).Admin().SetClientRevoked(map[string]uint64{"root": 1, "alice": 1})
	}
	// alice's connection ends, and no member takes her back.
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := alice.Put(pctx, "alice/a", []byte("2"))
		return err != nil
	}, 30*time.Second, 50*time.Millisecond)
	_, err = connectCred(t, ctx, c, "", creds["alice"])
	require.ErrorIs(t, err, coord.ErrUnauthenticated)

	// bob was not touched: same member, still working.
	_, err = bob.Put(ctx, "bob/b", []byte("1"))
	require.NoError(t, err)
	require.Equal(t, before, bob.Member())
	_, err = r.Get(ctx, "hosts/h1")
	require.NoError(t, err)

	alice2, err := coord.IssueClientCredential(credClientSecret, "alice", 2)
	require.NoError(t, err)
	a2, err := connectCred(t, ctx, c, "", alice2)
	require.NoError(t, err)
	_, err = a2.Put(ctx, "alice/a", []byte("3"))
	require.NoError(t, err)
}

// TestClientCredentialNeverMakesAMember: a credential's certificate,
// even one naming a member, is refused by the members' transport.
func TestClientCredentialNeverMakesAMember(t *testing.T) {
	t.Parallel()
	secret := bytes.Repeat([]byte{0x43}, 32)
	for name, clientSecret := range map[string][]byte{"client secret apart": bytes.Repeat([]byte{0x44}, 32), "the member secret": nil} {
		_, peers := tcpCell(t, func(c *coord.Config) { c.Secret, c.ClientSecret = secret, clientSecret })
		issuer := clientSecret
		if issuer == nil {
			issuer = secret
		}
		cred, err := coord.IssueClientCredential(issuer, peers[1].Name, 1)
		require.NoError(t, err)
		tc := credTLS(t, cred)
		tc.VerifyConnection = nil // only the member's verdict on us matters here
		conn, err := tls.Dial("tcp", peers[0].Addr, tc)
		if err == nil {
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		var ne net.Error
		require.Error(t, err, name)
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "%s: the member did not refuse the credential: %v", name, err)
	}
}

// TestClientCredentialConfig: Connect refuses a credential it cannot
// use before dialling anyone, and IssueClientCredential bad arguments.
func TestClientCredentialConfig(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 10*time.Second)
	cred, err := coord.IssueClientCredential(credClientSecret, "alice", 1)
	require.NoError(t, err)
	again, err := coord.IssueClientCredential(credClientSecret, "alice", 1)
	require.NoError(t, err)
	require.Equal(t, cred, again)
	members := []string{"127.0.0.1:1"}
	for name, cfg := range map[string]coord.ClientConfig{
		"not a credential": {Credential: "alice", Members: members},
		"truncated":        {Credential: cred[:len(cred)-3], Members: members},
		"another name":     {Name: "bob", Credential: cred, Members: members},
		"with a secret":    {Credential: cred, Secret: credClientSecret, Members: members},
		"with TLS":         {Credential: cred, TLS: &tls.Config{}, Members: members},
	} {
		_, err := coord.Connect(ctx, cfg)
		require.ErrorIs(t, err, coord.ErrInvalidConfig, name)
	}
	for name, args := range map[string]struct {
		secret []byte
		name   string
		gen    uint64
	}{"short secret": {[]byte("short"), "a", 1}, "no name": {credClientSecret, "", 1}, "generation 0": {credClientSecret, "a", 0}} {
		_, err := coord.IssueClientCredential(args.secret, args.name, args.gen)
		require.ErrorIs(t, err, coord.ErrInvalidArgument, name)
	}
}

// TestClientSecretDeprecated: a client given the client secret itself
// still connects, as before credentials, and is told why it should not.
func TestClientSecretDeprecated(t *testing.T) {
	t.Parallel()
	c, _ := credCell(t, nil)
	ctx := ctxT(t, 30*time.Second)
	var logs lockedBuffer
	cl, err := coord.Connect(ctx, coord.ClientConfig{Name: "carol", Members: clientAddrs(c), Secret: credClientSecret,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.Put(ctx, "carol/x", []byte("1"))
	require.NoError(t, err)
	require.Contains(t, logs.String(), "ClientConfig.Secret is deprecated")
}

// TestClientCredentialAsPEMFiles: a TLS client that knows nothing of
// coord (as etcd's clients) presents a credential from its PEM files and
// verifies the member with the client CA alone, as a plain tls.Config
// does: it is admitted as the credential's name.
func TestClientCredentialAsPEMFiles(t *testing.T) {
	t.Parallel()
	var ids identities
	c, _ := credCell(t, func(cfg *coord.Config) {
		cfg.ClientPolicy = func(id string) (coord.ClientGrant, error) {
			ids.policy(id)
			return hostGrants(id)
		}
	})
	ctx := ctxT(t, 30*time.Second)
	cc, err := transport.IssueClientCredential(credClientSecret, "alice", 1)
	require.NoError(t, err)
	certPEM, keyPEM, err := cc.CertificatePEM()
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	ca, err := transport.ClientSecretCA(credClientSecret)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	n := c.Node(0)
	raw, err := dialTLS(ctx, n.Admin().ClientAddr(), &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots,
		ServerName: n.Status().Name, MinVersion: tls.VersionTLS13})
	require.NoError(t, err)
	w, err := clientwire.Handshake(ctx, raw, clientwire.ClientOptions{Name: "whoever"})
	require.NoError(t, err)
	defer w.Close()
	put, err := command.Encode(putCmd("alice/pem", "1", 0))
	require.NoError(t, err)
	_, err = w.Propose(ctx, put)
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, ids.all())
}
