package member

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/transport"
)

// How a member's client port tells who a client is. Under TLS a client
// presents one of:
//
//   - a certificate from a CA the port trusts (the members' own, under
//     Config.TLS or Secret): it names its holder (certIdentity);
//   - a certificate the client secret's CA signed, which only a holder
//     of the client secret can make (for any name: the deprecated
//     ClientConfig.Secret);
//   - a client credential (IssueClientCredential): a self-signed
//     certificate whose key the member recomputes from the client secret
//     for the name and generation it claims (transport.ClientVerifier),
//     refused when that generation is revoked (Config.ClientRevoked).
//
// The port requires a certificate but leaves its checking to
// authenticate, which accepts exactly those three, so that a credential,
// which chains to no CA, can pass at all.

// errClientCert is why the port refused a client's certificate.
var errClientCert = errors.New("client certificate refused")

// clientAuth is the port's trust and its record of refusals.
type clientAuth struct {
	log      *slog.Logger
	member   *tls.Config               // the members' TLS, whose CAs the port trusts for clients; nil for none
	clientCA *x509.Certificate         // the client secret's CA; nil without a secret
	verifier *transport.ClientVerifier // checks credentials; nil without a secret
	static   *x509.CertPool            // member's CAs and clientCA, when member does not reload
	revoked  atomic.Pointer[map[string]uint64]

	refused    atomic.Uint64 // certificates refused
	lastWarn   atomic.Int64  // unix nanoseconds of the last refusal logged
	suppressed atomic.Uint64 // refusals not logged since

	mu   sync.Mutex
	live map[*clientHandler]liveCred // connections admitted by a credential, for revocation
}

// liveCred is a connection a credential admitted. Its own copy of the
// name and generation: the handler's fields belong to its connection's
// goroutine.
type liveCred struct {
	name string
	gen  uint64
	conn net.Conn
}

// refusalLogEvery bounds the WARN lines refusals log: the first, then at
// most one per interval with the count of the others.
const refusalLogEvery = 10 * time.Second

func newClientAuth(cfg *Config, log *slog.Logger) *clientAuth {
	a := &clientAuth{log: log, live: make(map[*clientHandler]liveCred)}
	a.setRevoked(cfg.ClientRevoked)
	switch {
	case cfg.Secret != nil:
		if t, err := transport.SecretTLS(cfg.Secret, cfg.Name); err == nil {
			a.member = t
		}
	case cfg.TLS != nil:
		a.member = cfg.TLS
	}
	secret := cfg.ClientSecret
	if secret == nil {
		secret = cfg.Secret
	}
	if secret != nil {
		// The secrets' lengths are checked by Config.validate; a failure
		// here leaves the port without credentials (clientPortTLS fails).
		a.clientCA, _ = transport.ClientSecretCA(secret)
		a.verifier, _ = transport.NewClientVerifier(secret)
	}
	if a.member == nil || a.member.GetConfigForClient == nil {
		a.static = a.trust(a.member)
	}
	return a
}

// trust is the pool of CAs whose client certificates the port takes: m's
// ClientCAs and the client secret's CA. nil when there are none.
func (a *clientAuth) trust(m *tls.Config) *x509.CertPool {
	var pool *x509.CertPool
	if m != nil && m.ClientCAs != nil {
		pool = m.ClientCAs.Clone()
	}
	if a.clientCA != nil {
		if pool == nil {
			pool = x509.NewCertPool()
		}
		pool.AddCert(a.clientCA)
	}
	return pool
}

// pool is the trust as of now: a reloading TLS (TLSFiles) serves its
// current CA through GetConfigForClient.
func (a *clientAuth) pool() *x509.CertPool {
	if a.static != nil || a.member == nil || a.member.GetConfigForClient == nil {
		return a.static
	}
	cur, err := a.member.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil || cur == nil {
		return a.trust(a.member)
	}
	return a.trust(cur)
}

// authenticate returns who the client of a finished TLS handshake is,
// and the generation of its credential (0 when it presented none). A
// chain the listener's own configuration verified (a host's listener
// passed to ServeClients) is taken as it is.
func (a *clientAuth) authenticate(cs tls.ConnectionState) (identity string, generation uint64, err error) {
	if len(cs.PeerCertificates) == 0 {
		return "", 0, fmt.Errorf("%w: no certificate", errClientCert)
	}
	leaf := cs.PeerCertificates[0]
	if len(cs.VerifiedChains) > 0 {
		return certIdentity(leaf), 0, nil
	}
	var chainErr error = errors.New("no CA is trusted for clients")
	if pool := a.pool(); pool != nil {
		opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if a.member != nil && a.member.Time != nil {
			opts.CurrentTime = a.member.Time()
		}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		if _, chainErr = leaf.Verify(opts); chainErr == nil {
			return certIdentity(leaf), 0, nil
		}
	}
	if a.verifier == nil || !transport.IsClientCredentialCert(leaf) {
		return "", 0, fmt.Errorf("%w: certificate for %q: %w", errClientCert, leaf.Subject.CommonName, chainErr)
	}
	name, gen, err := a.verifier.Verify(leaf)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", errClientCert, err)
	}
	if r := (*a.revoked.Load())[name]; gen <= r {
		return "", 0, fmt.Errorf("%w: the credential of %q, generation %d, is revoked (Config.ClientRevoked: through %d)",
			errClientCert, name, gen, r)
	}
	return name, gen, nil
}

// verifyConnection is the client port's tls.Config.VerifyConnection: a
// refusal fails the handshake with an alert, which the client reports as
// errs.Unauthenticated.
func (a *clientAuth) verifyConnection(cs tls.ConnectionState) error {
	if _, _, err := a.authenticate(cs); err != nil {
		a.refuse("", err)
		return err
	}
	return nil
}

// refuse counts a refused certificate and logs it, at a bounded rate:
// a flood of forged certificates costs a counter, not the log.
func (a *clientAuth) refuse(remote string, err error) {
	a.refused.Add(1)
	now := time.Now().UnixNano()
	last := a.lastWarn.Load()
	if now-last < int64(refusalLogEvery) || !a.lastWarn.CompareAndSwap(last, now) {
		a.suppressed.Add(1)
		return
	}
	args := []any{"err", err, "suppressed", a.suppressed.Swap(0)}
	if remote != "" {
		args = append(args, "remote", remote)
	}
	a.log.Warn("refused a client's certificate", args...)
}

// setRevoked replaces the revocations with a copy of revoked.
func (a *clientAuth) setRevoked(revoked map[string]uint64) {
	m := maps.Clone(revoked)
	if m == nil {
		m = map[string]uint64{}
	}
	a.revoked.Store(&m)
}

// admit records a connection the credential of name at generation gen
// admitted, so a revocation can end it; it fails if the credential was
// revoked since the handshake.
func (a *clientAuth) admit(h *clientHandler, name string, gen uint64, conn net.Conn) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := (*a.revoked.Load())[name]; gen <= r {
		return fmt.Errorf("%w: the credential of %q, generation %d, is revoked", errClientCert, name, gen)
	}
	a.live[h] = liveCred{name: name, gen: gen, conn: conn}
	return nil
}

func (a *clientAuth) leave(h *clientHandler) {
	a.mu.Lock()
	delete(a.live, h)
	a.mu.Unlock()
}

// revoke installs revoked and ends every connection a credential it
// revokes admitted.
func (a *clientAuth) revoke(revoked map[string]uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.setRevoked(revoked)
	cur := *a.revoked.Load()
	for h, l := range a.live {
		if l.gen <= cur[l.name] {
			a.log.Warn("ended a client whose credential was revoked", "client", l.name, "generation", l.gen)
			l.conn.Close()
			delete(a.live, h)
		}
	}
}

// SetClientRevoked replaces Config.ClientRevoked while the member runs:
// from now on a credential of name N and generation G is refused when G
// <= revoked[N], and the connections such credentials were admitted with
// are ended at once. Other clients are not touched. Set it on every
// member (each holds its own copy, as of its configuration); the map is
// copied.
func (n *Node) SetClientRevoked(revoked map[string]uint64) {
	n.clients.auth.revoke(revoked)
}
