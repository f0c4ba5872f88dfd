package coord

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"

	"github.com/coordcell/coord/internal/client"
	"github.com/coordcell/coord/transport"
)

// ClientConfig configures Connect.
type ClientConfig struct {
	// Name is the client's name: its identity in plaintext (members
	// trust it only then), the name its credential or certificate must
	// prove otherwise, and in every case the name in the members' logs.
	// Required, except with a Credential, whose name it then is.
	Name string
	// Members are the client addresses of the members (Config.ClientAddr,
	// Admin.ClientAddr). Connect tries them in a random order, and the
	// client moves to another when its member fails. At least one. The
	// client also learns the cell's client addresses from its members
	// (Learned) and tries those after these, which stay.
	Members []string
	// Credential is the client's own credential, from
	// IssueClientCredential (or `coordctl client issue`) on whoever holds
	// the cell's client secret: the way to authenticate a client that the
	// cell's operator does not trust as much as a member. It proves Name
	// and nothing else: a client holding it can connect as Name only, so
	// ClientPolicy's grants and the ownership of sessions and recipe keys
	// hold against it. The client derives a TLS certificate from it, and
	// trusts members presenting one of the cell's client CA (whose public
	// key the credential carries). Exclusive with TLS and Secret.
	Credential string
	// TLS authenticates the client to the members and the members to the
	// client (mutual TLS; the certificate names the client). A member's
	// certificate is checked against RootCAs; with ServerName empty, any
	// certificate of that CA for server use is accepted, since members
	// are dialled by address, not by name.
	TLS *tls.Config
	// Secret is the cell's client secret (Config.ClientSecret), or its
	// member secret (Config.Secret) if the cell sets no client secret.
	// The client derives from it a certificate for Name from the client
	// CA (transport.ClientSecretTLS), and trusts members presenting one
	// of that CA. Such a certificate is refused by the members' own
	// transport, so a client secret never makes a member. Exclusive with
	// TLS. With neither, the connection is plaintext (for tests and
	// trusted networks only).
	//
	// Deprecated: whoever holds the client secret can connect as any
	// client (it mints a certificate for any Name), so a client given it
	// can pose as every other client, and grants and session ownership
	// hold nothing against it. Give each client its own Credential
	// instead, and the secret to none. Connect still accepts Secret, and
	// logs a warning.
	Secret []byte
	// Dial opens a connection to a member's address (nil: TCP). coordtest
	// passes an in-memory dialler.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Logger receives the client's logs (default slog.Default()).
	Logger *slog.Logger
	// Cache lists key prefixes the client keeps in memory, each fed by
	// one ListWatch: Serializable() reads under them are answered
	// locally, without a round trip, and CacheRevision says the revision
	// they are current to. Linearizable reads still go to the member.
	// A read waits (at most an election timeout) for the cache to reach
	// the client's own last write under the prefix, and goes to the
	// member until the cache has listed. Empty: no cache.
	Cache []string
	// CacheMaxBytes bounds the memory of each cached prefix (keys, values
	// and a fixed overhead per key); a prefix that outgrows it is
	// dropped, its reads go to the member, and it is listed again later
	// (see CacheRevision). Default DefaultCacheMaxBytes.
	CacheMaxBytes int64
}

// DefaultCacheMaxBytes is ClientConfig.CacheMaxBytes when it is zero.
const DefaultCacheMaxBytes = 64 << 20

// Client is a process's way into a cell it is not a member of: a
// connection to one member at a time, over which the whole Cell API
// works as on a *Node. Sessions are kept alive by one batched keep-alive
// per interval for all of them, which the member folds into its own
// batch to the leader; watches of nested prefixes share one upstream
// watch. When its member fails or stops answering, the client moves to
// another member: sessions (within their TTL), holds and watches carry
// on; writes in flight end with ErrAmbiguous. With ClientConfig.Cache,
// serializable reads under its prefixes are answered from memory.
//
// A Client stores nothing on disk. It is safe for concurrent use.
type Client struct {
	// cellOps is the Cell API, over the client tier as its backend.
	*cellOps
	c *client.Client
}

// Connect connects to one of cfg.Members (tried in a random order) and
// returns the client. It fails if none accepts within ctx, or at once on
// a configuration error. The client keeps itself connected until Close.
func Connect(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.CacheMaxBytes == 0 {
		cfg.CacheMaxBytes = DefaultCacheMaxBytes
	}
	c, err := client.Connect(ctx, client.Config(cfg))
	if err != nil {
		return nil, err
	}
	cl := &Client{c: c}
	cl.cellOps = &cellOps{b: c, self: cl}
	return cl, nil
}

// Close ends the client: its sessions end locally with ErrClosed (in the
// cell they expire after their TTL; Close them first to end them at
// once), its watches with ErrClosed. Close is idempotent.
func (c *Client) Close() error { return c.c.Close() }

// Done is closed once Close has finished.
func (c *Client) Done() <-chan struct{} { return c.c.Done() }

// Err returns ErrClosed once the client is closed, nil before: a client
// does not give up on its own while Close has not been called.
func (c *Client) Err() error { return c.c.Err() }

// Member returns the name of the member the client talks to now, or ""
// while it is between members.
func (c *Client) Member() string { return c.c.Member() }

// Learned returns the client addresses the client learned from its
// members, which it tries after ClientConfig.Members.
func (c *Client) Learned() []string { return c.c.Learned() }

// CacheRevision returns the revision the client's cache of prefix (a
// prefix in ClientConfig.Cache, or one under it) is current to: every
// change up to it is in the cache, so a Serializable() read made after
// this call reflects at least that revision. (A Serializable() List from
// the cache returns the exact revision it read at.) The cache trails the
// cell by the time a change takes to reach the client, and, while the
// client is between members, by as long as that lasts.
//
// It fails with ErrInvalidArgument when no cache covers prefix; with
// ErrNotReady before the cache's first listing; with ErrQuotaExceeded
// while the prefix is larger than ClientConfig.CacheMaxBytes (the cache
// lists again later, with growing waits, and serves once it fits). While
// it fails, Serializable() reads under prefix are answered by the member.
func (c *Client) CacheRevision(prefix string) (int64, error) { return c.c.CacheRevision(prefix) }

// IssueClientCredential returns the credential of client name at
// generation (1 or more), in the text form ClientConfig.Credential takes.
// secret is the cell's client secret (Config.ClientSecret, or its Secret
// when it sets none): whoever holds it issues credentials, and nobody
// else can. A credential proves name and nothing else: its holder
// connects as name, and a member refuses it for any other name or
// generation (see transport.ClientCredential for how). The same
// arguments give the same credential, so a lost one can be issued again.
// To revoke one, issue name's next generation, give it to the client,
// and set Config.ClientRevoked[name] (or Admin.SetClientRevoked) to the
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
