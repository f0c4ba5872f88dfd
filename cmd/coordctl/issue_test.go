package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
)

// TestClientIssue: coordctl issues the credential IssueClientCredential
// does, offline, and the PEM files a TLS client takes.
func TestClientIssue(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "client.secret")
	secret := bytes.Repeat([]byte{7}, 32)
	require.NoError(t, os.WriteFile(secretFile, secret, 0o600))
	ctl := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		return out.String(), err
	}

	out, err := ctl("client", "issue", "-secret-file", secretFile, "worker-1")
	require.NoError(t, err)
	want, err := coord.IssueClientCredential(secret, "worker-1", 1)
	require.NoError(t, err)
	require.Equal(t, want, strings.TrimSpace(out))

	pemDir := filepath.Join(dir, "pem")
	out, err = ctl("--json", "client", "issue", "-secret-file", secretFile, "-pem", pemDir, "worker-1", "3")
	require.NoError(t, err)
	var rec issued
	require.NoError(t, json.Unmarshal([]byte(out), &rec))
	require.Equal(t, "worker-1", rec.Name)
	require.EqualValues(t, 3, rec.Generation)
	want, err = coord.IssueClientCredential(secret, "worker-1", 3)
	require.NoError(t, err)
	require.Equal(t, want, rec.Credential)

	pair, err := tls.LoadX509KeyPair(filepath.Join(pemDir, "client.crt"), filepath.Join(pemDir, "client.key"))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	v, err := transport.NewClientVerifier(secret)
	require.NoError(t, err)
	name, gen, err := v.Verify(leaf)
	require.NoError(t, err)
	require.Equal(t, "worker-1", name)
	require.EqualValues(t, 3, gen)
	fi, err := os.Stat(filepath.Join(pemDir, "client.key"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	caPEM, err := os.ReadFile(filepath.Join(pemDir, "ca.crt"))
	require.NoError(t, err)
	ca, err := transport.ClientSecretCA(secret)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	require.True(t, pool.Equal(func() *x509.CertPool { p := x509.NewCertPool(); p.AddCert(ca); return p }()))

	for name, args := range map[string][]string{
		"no secret file": {"client", "issue", "worker-1"},
		"no name":        {"client", "issue", "-secret-file", secretFile},
		"generation 0":   {"client", "issue", "-secret-file", secretFile, "w", "0"},
		"bad generation": {"client", "issue", "-secret-file", secretFile, "w", "x"},
		"not issue":      {"client", "revoke", "w"},
		"unknown flag":   {"client", "issue", "-nope", "w"},
		"too many":       {"client", "issue", "-secret-file", secretFile, "w", "1", "2"},
	} {
		_, err := ctl(args...)
		require.ErrorIs(t, err, errUsage, name)
	}
	_, err = ctl("client", "issue", "-secret-file", filepath.Join(dir, "missing"), "w")
	require.Error(t, err)
	require.NoError(t, os.WriteFile(secretFile, []byte("short"), 0o600))
	_, err = ctl("client", "issue", "-secret-file", secretFile, "w")
	require.ErrorIs(t, err, transport.ErrWeakSecret)
}
