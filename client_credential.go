package coord

import (
	"fmt"

	"github.com/coordcell/coord/transport"
)

// IssueClientCredential returns the credential of client name at
// generation (1 or more), in the text form ClientConfig.Credential takes.
// secret is the cell's client secret (Config.ClientSecret, or its Secret
// when it sets none): whoever holds it issues credentials, and nobody
// else can. A credential proves name and nothing else: its holder
// connects as name, and a member refuses it for any other name or
// generation (see transport.ClientCredential for how). The same
// arguments give the same credential, so a lost one can be issued again.
// To revoke one, issue name's next generation, give it to the client,
// and set Config.ClientRevoked[name] (or Node.SetClientRevoked) to the
// old generation on every member. `coordctl client issue` does the same
// from the command line. The credential is secret: keep it as the
// client's private key. Errors wrap ErrInvalidArgument.
func IssueClientCredential(secret []byte, name string, generation uint64) (string, error) {
	c, err := transport.IssueClientCredential(secret, name, generation)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return c.Text(), nil
}
