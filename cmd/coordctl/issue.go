package main

import (
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/coordcell/coord/transport"
)

// issued is what "client issue" prints with --json.
type issued struct {
	Name       string `json:"name"`
	Generation uint64 `json:"generation"`
	Credential string `json:"credential"`
}

// clientIssue runs "client issue": it needs no member, only the cell's
// client secret, which it reads from a file and never prints.
func clientIssue(out output, args []string) error {
	const form = "client issue -secret-file FILE [-pem DIR] NAME [GENERATION]"
	fs := flag.NewFlagSet("client issue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	secretFile := fs.String("secret-file", os.Getenv("COORDCTL_CLIENT_SECRET_FILE"), "")
	pemDir := fs.String("pem", "", "")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: coordctl %s: %w", errUsage, form, err)
	}
	if fs.NArg() < 1 || fs.NArg() > 2 || *secretFile == "" {
		return fmt.Errorf("%w: coordctl %s", errUsage, form)
	}
	name, gen := fs.Arg(0), uint64(1)
	if fs.NArg() == 2 {
		var err error
		if gen, err = strconv.ParseUint(fs.Arg(1), 10, 64); err != nil || gen == 0 {
			return fmt.Errorf("%w: GENERATION %q: a whole number from 1", errUsage, fs.Arg(1))
		}
	}
	secret, err := os.ReadFile(*secretFile)
	if err != nil {
		return fmt.Errorf("secret file: %w", err)
	}
	cred, err := transport.IssueClientCredential(secret, name, gen)
	if err != nil {
		return err
	}
	if *pemDir != "" {
		if err := writePEM(*pemDir, secret, cred); err != nil {
			return err
		}
	}
	rec := issued{Name: name, Generation: gen, Credential: cred.Text()}
	return out.print(rec, func(w io.Writer) { fmt.Fprintln(w, rec.Credential) })
}

// writePEM writes the credential as the files any TLS client takes:
// client.crt and client.key (readable by the owner only), and ca.crt,
// the CA that verifies members.
func writePEM(dir string, secret []byte, cred transport.ClientCredential) error {
	certPEM, keyPEM, err := cred.CertificatePEM()
	if err != nil {
		return err
	}
	ca, err := transport.ClientSecretCA(secret)
	if err != nil {
		return err
	}
	caPEM := pemCert(ca.Raw)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "client.key"), keyPEM, 0o600),
		os.WriteFile(filepath.Join(dir, "client.crt"), certPEM, 0o644),
		os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o644),
	)
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
