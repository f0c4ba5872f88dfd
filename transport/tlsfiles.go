package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
)

// ErrCertUsage is returned when a member's certificate cannot serve both
// ends of a member connection: every member accepts connections (TLS
// server) and dials its peers (TLS client) with the same certificate, so
// it needs both usages.
var ErrCertUsage = errors.New("transport: certificate lacks a usage members need")

// TLSFiles names PEM files that make a member's mutual TLS, reloaded
// when they change, so that certificates can be rotated without
// restarting the member.
//
// The certificate members need:
//
//   - Extended key usages serverAuth AND clientAuth (or none at all, which
//     Go reads as any): a member is the server of the connections it
//     accepts and the client of those it dials. A certificate with only
//     serverAuth, as public CAs issue, is refused with ErrCertUsage.
//   - Key usage digitalSignature (TLS 1.3 signs with the key).
//   - A subject alternative name naming the member: a DNS SAN equal to
//     its member name (Config.Name), or a URI SAN equal to it, or else
//     the subject common name (see DefaultVerifyPeer). Peers check the
//     name, not the address: IP SANs are not needed.
//   - Signed by a CA in the CA file (intermediates may follow the leaf in
//     the certificate file). One CA file serves both sides: it verifies
//     the servers this member dials and the clients it accepts. Trust a
//     CA that signs members only, since any certificate it signs for a
//     member's name speaks for that member.
//
// Rotation: files are looked at (a stat of each, cheap next to a
// handshake) at every handshake; when one changed (another file, size or
// modification time), all are read again. Rotate the key and certificate
// together, say by renaming new files over the old ones, key first: a
// certificate and key that do not match, or any other bad file, leave
// the last good set in use and are reported to OnReload, and read again
// at the next handshake. To rotate the CA, first add the new CA to the CA
// file beside the old one on every member, then issue new certificates,
// then drop the old CA.
type TLSFiles struct {
	CA   string // PEM file of the CA certificates trusted for members
	Cert string // PEM file of the member's certificate (then intermediates)
	Key  string // PEM file of its private key

	// OnReload, when set, hears of each reload after changed files: nil
	// when the new set is in use, else why the last good set stays. It
	// is called during a handshake, so it must be quick (log and return).
	OnReload func(err error)
}

// Config loads the files and returns a mutual TLS configuration for
// member name (for Config.TLS of coord or TCPConfig.TLS): TLS 1.3,
// client certificates required and verified against the CA file. It
// fails when a file cannot be read or parsed, when the key does not
// match the certificate, when the certificate is not signed by the CA
// file or does not name the member (ErrPeerIdentity), or when it lacks
// serverAuth or clientAuth (ErrCertUsage). name "" skips the name check.
//
// The certificate is reloaded on both sides of a connection, and so is
// the CA for the clients this member accepts. The configuration's
// GetConfigForClient, whatever the hello, returns the current
// configuration, CA pool included, for a dialer that verifies servers
// itself.
func (f TLSFiles) Config(name string) (*tls.Config, error) {
	r := &tlsReloader{files: f, name: name}
	set, stamps, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur, r.stamps = set, stamps
	base := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return r.current().cert, nil
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.current().cert, nil
		},
	}
	r.base = base
	cfg := r.configFor(set)
	// A server calls this on every handshake: it picks up a new CA for
	// the clients it verifies, which the fixed ClientCAs field cannot.
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return r.configFor(r.current()), nil
	}
	return cfg, nil
}

// tlsReloader holds the last good set of files and their stamps.
type tlsReloader struct {
	files TLSFiles
	name  string
	base  *tls.Config // the fields every returned config shares

	mu     sync.Mutex
	cur    *tlsSet
	stamps [3]os.FileInfo // CA, Cert, Key as last read
}

type tlsSet struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

func (r *tlsReloader) configFor(s *tlsSet) *tls.Config {
	c := r.base.Clone()
	c.RootCAs, c.ClientCAs = s.pool, s.pool
	return c
}

// current returns the set in use, reading the files again first if
// they changed since they were last read.
func (r *tlsReloader) current() *tlsSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.changed() {
		return r.cur
	}
	set, stamps, err := r.load()
	if err == nil {
		r.cur, r.stamps = set, stamps
	}
	if r.files.OnReload != nil {
		r.files.OnReload(err)
	}
	return r.cur
}

// changed reports whether a file is not the one last read: replaced
// (another inode), or written in place (size or modification time).
// A file that cannot be stat'ed counts as changed, so that the reload
// reports why.
func (r *tlsReloader) changed() bool {
	for i, path := range r.paths() {
		fi, err := os.Stat(path)
		old := r.stamps[i]
		if err != nil || old == nil || !os.SameFile(fi, old) ||
			fi.Size() != old.Size() || !fi.ModTime().Equal(old.ModTime()) {
			return true
		}
	}
	return false
}

func (r *tlsReloader) paths() [3]string {
	return [3]string{r.files.CA, r.files.Cert, r.files.Key}
}

// maxPEMFile bounds each file read: certificates and keys are a few
// kilobytes, and a CA bundle rarely a few hundred.
const maxPEMFile = 4 << 20

// load reads and checks the three files. The stamps are taken before
// reading, so that a write during the read shows as a change next time.
func (r *tlsReloader) load() (*tlsSet, [3]os.FileInfo, error) {
	var stamps [3]os.FileInfo
	var data [3][]byte
	for i, path := range r.paths() {
		if path == "" {
			return nil, stamps, fmt.Errorf("%w: TLSFiles needs CA, Cert and Key", ErrConfig)
		}
		fi, err := os.Stat(path)
		if err != nil {
			return nil, stamps, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if fi.Size() > maxPEMFile {
			return nil, stamps, fmt.Errorf("%w: %s is %d bytes, more than the %d a PEM file may have",
				ErrConfig, path, fi.Size(), maxPEMFile)
		}
		stamps[i] = fi
		if data[i], err = os.ReadFile(path); err != nil {
			return nil, stamps, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[0]) {
		return nil, stamps, fmt.Errorf("%w: no PEM certificate in CA file %s", ErrConfig, r.files.CA)
	}
	cert, err := tls.X509KeyPair(data[1], data[2])
	if err != nil {
		return nil, stamps, fmt.Errorf("%w: certificate %s and key %s: %w", ErrConfig, r.files.Cert, r.files.Key, err)
	}
	if err := checkMemberCert(cert, pool, r.name); err != nil {
		return nil, stamps, fmt.Errorf("certificate %s: %w", r.files.Cert, err)
	}
	return &tlsSet{cert: &cert, pool: pool}, stamps, nil
}

// checkMemberCert checks what TLSFiles documents: both usages, a chain
// to the CA, and the member's name.
func checkMemberCert(cert tls.Certificate, pool *x509.CertPool, name string) error {
	leaf := cert.Leaf // tls.X509KeyPair parses it
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	for _, u := range []struct {
		usage x509.ExtKeyUsage
		what  string
	}{{x509.ExtKeyUsageServerAuth, "serverAuth (to accept peers)"}, {x509.ExtKeyUsageClientAuth, "clientAuth (to dial peers)"}} {
		if !hasUsage(leaf, u.usage) {
			return fmt.Errorf("%w: no extended key usage %s; it has %s", ErrCertUsage, u.what, usageNames(leaf))
		}
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("%w: intermediate: %w", ErrConfig, err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("%w: not verified by the CA file: %w", ErrConfig, err)
	}
	if name != "" {
		return DefaultVerifyPeer(name, leaf)
	}
	return nil
}

// hasUsage follows Go's verifier: a certificate without extended key
// usages may be used for anything.
func hasUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return true
	}
	return slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny) || slices.Contains(c.ExtKeyUsage, u)
}

func usageNames(c *x509.Certificate) string {
	names := map[x509.ExtKeyUsage]string{x509.ExtKeyUsageServerAuth: "serverAuth",
		x509.ExtKeyUsageClientAuth: "clientAuth", x509.ExtKeyUsageCodeSigning: "codeSigning",
		x509.ExtKeyUsageEmailProtection: "emailProtection"}
	var out []string
	for _, u := range c.ExtKeyUsage {
		if n, ok := names[u]; ok {
			out = append(out, n)
		} else {
			out = append(out, fmt.Sprintf("usage %d", u))
		}
	}
	if len(c.UnknownExtKeyUsage) > 0 {
		out = append(out, fmt.Sprintf("%d unknown", len(c.UnknownExtKeyUsage)))
	}
	return fmt.Sprint(out)
}
