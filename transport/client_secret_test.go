package transport

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/require"
)

// A client certificate from the client secret is refused by the member
// transport, even when the member secret is the very same bytes: the
// client CA is derived under another label.
func TestClientSecretRefusedOnMemberPort(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a", Secret: testSecret(1)})
	for _, secret := range [][]byte{testSecret(1), testSecret(2)} {
		cfg, err := ClientSecretTLS(secret, "b") // calls itself a member's name
		require.NoError(t, err)
		// Only the member's check of the client certificate is tested.
		cfg.InsecureSkipVerify = true
		c, err := tls.Dial("tcp", a.Addr(), cfg)
		if err == nil {
			// TLS 1.3: the server's refusal arrives after the client's
			// half of the handshake.
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		require.Error(t, err, "a client certificate joined the member transport")
	}
}

func TestClientSecretTLS(t *testing.T) {
	client, err := ClientSecretTLS(testSecret(1), "app")
	require.NoError(t, err)
	member, err := ClientSecretTLS(testSecret(1), "n0")
	require.NoError(t, err)
	ca, err := ClientSecretCA(testSecret(1))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf := client.Certificates[0].Leaf
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "ClientSecretCA is the CA of ClientSecretTLS")
	_, err = leaf.Verify(x509.VerifyOptions{Roots: member.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	require.NoError(t, DefaultVerifyPeer("app", leaf))

	memberTLS, err := SecretTLS(testSecret(1), "n0")
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: memberTLS.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.Error(t, err, "the member CA trusts a client certificate")
	_, err = memberTLS.Certificates[0].Leaf.Verify(x509.VerifyOptions{Roots: roots})
	require.Error(t, err, "the client CA trusts a member certificate")

	_, err = ClientSecretTLS(make([]byte, MinSecretLen-1), "app")
	require.ErrorIs(t, err, ErrWeakSecret)
	_, err = ClientSecretCA(nil)
	require.ErrorIs(t, err, ErrWeakSecret)
	_, err = ClientSecretTLS(testSecret(1), "")
	require.ErrorIs(t, err, ErrConfig)
}
