package transport

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"unicode/utf8"
)

// Client credentials: one client's proof of its own name, issued by
// whoever holds the cell's client secret, so that the secret itself
// never has to reach a client (a holder of the secret can claim any name).
//
// A credential for name N at generation G is, at its heart, a 32-byte
// key K = HMAC-SHA256(C, "coord client v1" || G (8 bytes, big-endian) ||
// N), where C = HKDF-SHA256(client secret, info "coord client
// credential"). K seeds an Ed25519 key pair; the client presents, in a
// standard TLS 1.3 handshake, a self-signed certificate of that key that
// names N (common name) and G (serial number). A member, knowing the
// secret, recomputes K for the N and G the certificate claims and
// compares public keys: the handshake has proved the client holds the
// private key, so it holds K, which only the secret could make for N.
// Another name, or another generation, needs another K: a credential
// proves one name only, and a member can refuse generations it was told
// are revoked. The credential also carries the public key of the
// client CA (ClientSecretCA), with which the client verifies members.
//
// Any TLS client can present a credential: CertificatePEM gives the
// certificate and key files, ClientSecretCA the CA certificate that
// verifies members. A server taking credentials requires a client
// certificate without verifying its chain (tls.RequireAnyClientCert),
// lists no CAs in its request (some clients send only a certificate one
// of them issued), and calls ClientVerifier.Verify.

// ErrClientCredential is returned for a credential text that does not
// parse, and by ClientVerifier for a certificate or text that is not a
// credential of the verifier's secret for the name it claims.
var ErrClientCredential = errors.New("transport: invalid client credential")

// MaxClientNameLen bounds a client credential's name in bytes, as
// members bound a client's identity.
const MaxClientNameLen = 256

const (
	// credentialTextPrefix starts a credential's text form; the digit is
	// its format version.
	credentialTextPrefix = "coord-client-1:"
	credentialFormat1    = 1
	// clientCredentialInfo is the HKDF info string of the key credentials
	// are HMACs under: apart from the CA keys' labels, so neither can be
	// computed from the other.
	clientCredentialInfo = "coord client credential"
	// credentialHMACLabel starts every HMAC input, for domain separation
	// and a version of the derivation.
	credentialHMACLabel = "coord client v1"
	// credentialUnit marks a credential's certificate (organizational
	// unit), so a member can tell one from a certificate of an unknown
	// CA when it explains a refusal.
	credentialUnit = "coord client credential"
)

// ClientCredential is one client's credential: its Name and Generation,
// and the key that proves them. Its Text form is what the client is
// given (keep it like a private key); String says only whose it is.
type ClientCredential struct {
	Name       string
	Generation uint64
	key        [32]byte // the Ed25519 seed: HMAC of Name and Generation
	ca         [32]byte // the client CA's public key, to verify members
}

// IssueClientCredential makes the credential for name at generation
// (1 or more) from the cell's client secret (Config.ClientSecret, or the
// member Secret when the cell sets none). The same arguments always give
// the same credential. To replace a credential (lost, leaked), issue the
// next generation and have members refuse the older ones.
func IssueClientCredential(secret []byte, name string, generation uint64) (ClientCredential, error) {
	if len(secret) < MinSecretLen {
		return ClientCredential{}, fmt.Errorf("%w: %d bytes, need at least %d", ErrWeakSecret, len(secret), MinSecretLen)
	}
	if err := checkClientName(name); err != nil {
		return ClientCredential{}, err
	}
	if generation == 0 {
		return ClientCredential{}, fmt.Errorf("%w: credential generation 0: generations start at 1", ErrConfig)
	}
	v, err := NewClientVerifier(secret)
	if err != nil {
		return ClientCredential{}, err
	}
	c := ClientCredential{Name: name, Generation: generation, key: v.derive(name, generation)}
	copy(c.ca[:], v.caPub)
	return c, nil
}

func checkClientName(name string) error {
	if name == "" || len(name) > MaxClientNameLen || !utf8.ValidString(name) {
		return fmt.Errorf("%w: client name of %d bytes: 1 to %d of UTF-8", ErrConfig, len(name), MaxClientNameLen)
	}
	return nil
}

// Text returns the credential's text form, which ParseClientCredential
// reads: "coord-client-1:" then base64url. It is secret.
func (c ClientCredential) Text() string {
	b := []byte{credentialFormat1}
	b = binary.AppendUvarint(b, c.Generation)
	b = binary.AppendUvarint(b, uint64(len(c.Name)))
	b = append(b, c.Name...)
	b = append(b, c.key[:]...)
	b = append(b, c.ca[:]...)
	return credentialTextPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// String names the credential without revealing it.
func (c ClientCredential) String() string {
	return fmt.Sprintf("client credential for %q, generation %d", c.Name, c.Generation)
}

// ParseClientCredential reads a credential's text form (surrounding
// white space ignored, as in a file). Errors wrap ErrClientCredential.
func ParseClientCredential(text string) (ClientCredential, error) {
	bad := func(why string) (ClientCredential, error) {
		return ClientCredential{}, fmt.Errorf("%w: %s", ErrClientCredential, why)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(text), credentialTextPrefix)
	if !ok {
		return bad("not a coord client credential (it starts with " + credentialTextPrefix + ")")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	if err != nil || len(b) < 1 {
		return bad("not base64url")
	}
	if b[0] != credentialFormat1 {
		return bad(fmt.Sprintf("format %d", b[0]))
	}
	b = b[1:]
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var c ClientCredential
	gen, ok1 := uvarint()
	n, ok2 := uvarint()
	if !ok1 || !ok2 || n > MaxClientNameLen || uint64(len(b)) != n+64 {
		return bad("malformed")
	}
	c.Name, c.Generation = string(b[:n]), gen
	copy(c.key[:], b[n:n+32])
	copy(c.ca[:], b[n+32:])
	if checkClientName(c.Name) != nil || gen == 0 {
		return bad("malformed name or generation")
	}
	return c, nil
}

// certificate returns the credential's key and self-signed certificate.
// Every field is fixed and Ed25519 signatures are deterministic, so it
// is the same certificate every time.
func (c ClientCredential) certificate() (tls.Certificate, error) {
	key := ed25519.NewKeyFromSeed(c.key[:])
	tmpl := &x509.Certificate{
		SerialNumber: new(big.Int).SetUint64(c.Generation),
		Subject:      pkix.Name{CommonName: c.Name, OrganizationalUnit: []string{credentialUnit}},
		NotBefore:    secretNotBefore,
		NotAfter:     secretNotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("transport: make credential certificate for %q: %w", c.Name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("transport: parse credential certificate for %q: %w", c.Name, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// TLS returns the client's TLS configuration: it presents the
// credential's certificate, and accepts a member whose certificate is
// signed by the client CA the credential names, for server use. A
// member's name is not checked (members are dialled by address; any
// member of the cell will do).
func (c ClientCredential) TLS() (*tls.Config, error) {
	cert, err := c.certificate()
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{PublicKey: ed25519.PublicKey(c.ca[:]), PublicKeyAlgorithm: x509.Ed25519}
	return &tls.Config{
		// Always this certificate: a server that lists the CAs it trusts
		// lists none a self-signed certificate names, and Go's client
		// would then send none.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		MinVersion:           tls.VersionTLS13,
		InsecureSkipVerify:   true, // verified in VerifyConnection, against the credential's CA key
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: the member presented no certificate", ErrPeerIdentity)
			}
			leaf := cs.PeerCertificates[0]
			if err := leaf.CheckSignatureFrom(ca); err != nil {
				return fmt.Errorf("%w: the member's certificate is not signed by the cell's client CA: %w", ErrPeerIdentity, err)
			}
			if !hasUsage(leaf, x509.ExtKeyUsageServerAuth) {
				return fmt.Errorf("%w: the member's certificate is not for server use", ErrPeerIdentity)
			}
			return nil
		},
	}, nil
}

// CertificatePEM returns the credential's certificate and its private key
// (PKCS #8) in PEM, for TLS clients that take files (etcdctl's --cert and
// --key, say); ClientSecretCA gives the CA that verifies members.
func (c ClientCredential) CertificatePEM() (certPEM, keyPEM []byte, err error) {
	cert, err := c.certificate()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: encode credential key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ClientVerifier checks client credentials on a member: it holds the
// key credentials are derived under, never the secret itself.
type ClientVerifier struct {
	key   []byte
	caPub ed25519.PublicKey
}

// NewClientVerifier returns the verifier of the credentials issued from
// secret.
func NewClientVerifier(secret []byte) (*ClientVerifier, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, need at least %d", ErrWeakSecret, len(secret), MinSecretLen)
	}
	key, err := hkdf.Key(sha256.New, secret, nil, clientCredentialInfo, sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("transport: derive credential key: %w", err)
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, clientSecretCAInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("transport: derive CA key: %w", err)
	}
	return &ClientVerifier{key: key, caPub: ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)}, nil
}

// derive is the credential key for name at generation.
func (v *ClientVerifier) derive(name string, generation uint64) [32]byte {
	m := hmac.New(sha256.New, v.key)
	m.Write([]byte(credentialHMACLabel))
	m.Write(binary.BigEndian.AppendUint64(nil, generation))
	m.Write([]byte(name))
	var k [32]byte
	m.Sum(k[:0])
	return k
}

// IsClientCredentialCert reports whether leaf has the shape of a
// credential's certificate. It proves nothing: Verify does.
func IsClientCredentialCert(leaf *x509.Certificate) bool {
	ou := leaf.Subject.OrganizationalUnit
	return len(ou) == 1 && ou[0] == credentialUnit
}

// Verify checks that leaf, the certificate a TLS handshake has just
// proved the peer holds the key of, is a credential of this verifier's
// secret, and returns the name and generation it proves. The name is
// the common name: a credential's certificate has no alternative names,
// so no other field can name anyone else. Errors wrap
// ErrClientCredential.
func (v *ClientVerifier) Verify(leaf *x509.Certificate) (name string, generation uint64, err error) {
	bad := func(format string, args ...any) (string, uint64, error) {
		return "", 0, fmt.Errorf("%w: %s", ErrClientCredential, fmt.Sprintf(format, args...))
	}
	name = leaf.Subject.CommonName
	if checkClientName(name) != nil {
		return bad("a certificate naming no valid client")
	}
	if len(leaf.DNSNames)+len(leaf.URIs)+len(leaf.EmailAddresses)+len(leaf.IPAddresses) > 0 {
		return bad("a certificate for %q with alternative names", name)
	}
	if leaf.SerialNumber == nil || leaf.SerialNumber.Sign() <= 0 || !leaf.SerialNumber.IsUint64() {
		return bad("a certificate for %q without a generation", name)
	}
	generation = leaf.SerialNumber.Uint64()
	pub, ok := leaf.PublicKey.(ed25519.PublicKey)
	if !ok {
		return bad("a certificate for %q without an Ed25519 key", name)
	}
	k := v.derive(name, generation)
	want := ed25519.NewKeyFromSeed(k[:]).Public().(ed25519.PublicKey)
	if subtle.ConstantTimeCompare(pub, want) != 1 {
		return bad("the key of the certificate for %q, generation %d, is not that client's", name, generation)
	}
	return name, generation, nil
}

// VerifyText checks a credential's text form, presented as a token
// rather than as a TLS certificate, and returns the name and generation
// it proves. Errors wrap ErrClientCredential.
func (v *ClientVerifier) VerifyText(text string) (name string, generation uint64, err error) {
	c, err := ParseClientCredential(text)
	if err != nil {
		return "", 0, err
	}
	k := v.derive(c.Name, c.Generation)
	if subtle.ConstantTimeCompare(k[:], c.key[:]) != 1 || subtle.ConstantTimeCompare(c.ca[:], v.caPub) != 1 {
		return "", 0, fmt.Errorf("%w: not %q's credential of generation %d", ErrClientCredential, c.Name, c.Generation)
	}
	return c.Name, c.Generation, nil
}
