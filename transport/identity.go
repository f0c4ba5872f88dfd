package transport

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// MinSecretLen is the shortest TCPConfig.Secret accepted, in bytes: the
// secret is the only thing standing between the cell and anyone who can
// reach its ports, so it must be as strong as the keys derived from it.
const MinSecretLen = 32

// secretCAInfo is the HKDF info string for the cell CA's key. Changing
// it splits every cell that uses a Secret from its older members.
const secretCAInfo = "coord cell CA"

// clientSecretCAInfo is the HKDF info string for the clients' CA key
// (ClientSecretTLS). Being another label, a certificate it signs is never
// trusted by the member transport, even when the bytes are the same
// secret.
const clientSecretCAInfo = "coord client CA"

// Validity of the certificates SecretTLS makes. The leaf's key lives in
// memory for one process only, so a wide window costs nothing, and it
// keeps clock skew between members (invariant 9 of DESIGN.md) from ever
// failing a handshake. 9999-12-31 is RFC 5280's "no expiry".
var (
	secretNotBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	secretNotAfter  = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// DefaultVerifyPeer is the matcher used when TCPConfig.VerifyPeer is nil.
// It accepts a verified certificate as naming member name when name
// equals one of its DNS SANs, the whole text of one of its URI SANs, or
// its subject common name. The chain itself has already been verified
// against the configured CAs when it is called.
func DefaultVerifyPeer(name string, leaf *x509.Certificate) error {
	if name == "" {
		return fmt.Errorf("%w: empty member name", ErrPeerIdentity)
	}
	if slices.Contains(leaf.DNSNames, name) || leaf.Subject.CommonName == name {
		return nil
	}
	for _, u := range leaf.URIs {
		if u.String() == name {
			return nil
		}
	}
	return fmt.Errorf("%w: certificate for %q does not name %q", ErrPeerIdentity, leaf.Subject.CommonName, name)
}

// SecretTLS derives a mutual TLS configuration for member name from a
// secret shared by the cell, for users without a PKI. It uses standard
// TLS 1.3 and X.509 only, no protocol of its own:
//
//   - the cell CA's Ed25519 key is seeded by HKDF-SHA256(secret, info
//     "coord cell CA"), so every member derives the same CA without
//     exchanging anything, and its self-signed certificate is the only
//     root trusted, for servers and clients alike;
//   - a fresh Ed25519 leaf key, made on every call and never stored,
//     gets a certificate for name (common name, and DNS SAN when name is
//     ASCII) signed by that CA, valid for both client and server use;
//   - client certificates are required and verified.
//
// Whoever knows the secret can mint a certificate for any name: the
// secret is the cell's single credential, to be kept like a private key.
// A peer with another secret fails the handshake. The secret must be at
// least MinSecretLen bytes, or the error wraps ErrWeakSecret.
func SecretTLS(secret []byte, name string) (*tls.Config, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, need at least %d", ErrWeakSecret, len(secret), MinSecretLen)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty member name", ErrConfig)
	}
	ca, caKey, err := secretCA(secret, secretCAInfo)
	if err != nil {
		return nil, err
	}
	return secretLeafTLS(ca, caKey, name)
}

// ClientSecretTLS is SecretTLS for a client that is not a member: its
// certificate is signed by a CA derived from secret under another label
// ("coord client CA"), so it authenticates the client to a member's
// client port but is refused by the member transport, whatever the
// secret. Members serving clients present a certificate from the same
// CA, which is what the client verifies. Whoever knows the client secret
// can mint a client certificate for any name (and pose as a member to
// other clients): keep it like a private key, apart from the members',
// and give clients a credential each instead (IssueClientCredential).
func ClientSecretTLS(secret []byte, name string) (*tls.Config, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, need at least %d", ErrWeakSecret, len(secret), MinSecretLen)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty client name", ErrConfig)
	}
	ca, caKey, err := secretCA(secret, clientSecretCAInfo)
	if err != nil {
		return nil, err
	}
	return secretLeafTLS(ca, caKey, name)
}

// ClientSecretCA returns the CA certificate ClientSecretTLS derives from
// secret, for a member's client port to trust beside its own CA.
func ClientSecretCA(secret []byte) (*x509.Certificate, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, need at least %d", ErrWeakSecret, len(secret), MinSecretLen)
	}
	ca, _, err := secretCA(secret, clientSecretCAInfo)
	return ca, err
}

// secretCA derives the CA certificate and key for info from secret.
func secretCA(secret []byte, info string) (*x509.Certificate, ed25519.PrivateKey, error) {
	seed, err := hkdf.Key(sha256.New, secret, nil, info, ed25519.SeedSize)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: derive CA key: %w", err)
	}
	caKey := ed25519.NewKeyFromSeed(seed)
	// Every field is fixed, and Ed25519 signatures are deterministic, so
	// all members hold the very same CA certificate.
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: info},
		NotBefore:             secretNotBefore,
		NotAfter:              secretNotAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: make CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: parse CA certificate: %w", err)
	}
	return ca, caKey, nil
}

// secretLeafTLS makes a fresh leaf for name signed by ca, in a mutual
// TLS configuration that trusts ca alone.
func secretLeafTLS(ca *x509.Certificate, caKey ed25519.PrivateKey, name string) (*tls.Config, error) {
	leafPub, leafKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("transport: make leaf key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("transport: make serial: %w", err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    secretNotBefore,
		NotAfter:     secretNotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if isASCII(name) {
		// Lets a plain tls.Dial with ServerName = name verify it too.
		leafTmpl.DNSNames = []string{name}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, leafPub, caKey)
	if err != nil {
		return nil, fmt.Errorf("transport: make certificate for %q: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return nil, fmt.Errorf("transport: parse certificate for %q: %w", name, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey, Leaf: leaf}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// peerClientTLS returns cfg adapted for dialling member peer. Go checks a
// server's certificate against the address dialled, but a member is
// known by its name, not its address: so the chain is verified here
// against cfg.RootCAs, and verify must accept the leaf as naming peer,
// or the handshake fails. This is what makes an address taken on a
// peer's own word safe to dial (raftnode/strangers.go): one that lies
// reaches a server that cannot prove the name, and nothing is sent. cfg's own VerifyConnection, if any, runs after
// these checks; VerifyPeerCertificate sees no verified chains.
func peerClientTLS(cfg *tls.Config, peer string, verify func(string, *x509.Certificate) error) *tls.Config {
	c := cfg.Clone()
	c.InsecureSkipVerify = true // the checks are in VerifyConnection below
	userVerify := cfg.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: %s presented no certificate", ErrPeerIdentity, peer)
		}
		// A config that reloads its CA (TLSFiles) serves the current one
		// through GetConfigForClient; the clone's RootCAs are as of dialling.
		// An empty hello, not nil, so a user's callback cannot trip on it.
		roots := cfg.RootCAs
		if cfg.GetConfigForClient != nil {
			if cur, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{}); err == nil && cur != nil && cur.RootCAs != nil {
				roots = cur.RootCAs
			}
		}
		opts := x509.VerifyOptions{
			Roots:         roots,
			Intermediates: x509.NewCertPool(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		if cfg.Time != nil {
			opts.CurrentTime = cfg.Time()
		}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		leaf := cs.PeerCertificates[0]
		if _, err := leaf.Verify(opts); err != nil {
			return err
		}
		if err := verify(peer, leaf); err != nil {
			return peerIdentityError(err)
		}
		if userVerify != nil {
			return userVerify(cs)
		}
		return nil
	}
	return c
}

// peerIdentityError makes sure a matcher's refusal is errors.Is-able as
// ErrPeerIdentity, whatever the user's matcher returned.
func peerIdentityError(err error) error {
	if errors.Is(err, ErrPeerIdentity) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrPeerIdentity, err)
}
