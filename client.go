package coord

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
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
	// Node.ClientAddr). Connect tries them in a random order, and the
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
	// cellOps is the Cell API, over this client as its backend.
	*cellOps
	cfg    ClientConfig
	log    *slog.Logger
	tlsCfg *tls.Config

	life context.Context // ends at Close
	stop context.CancelFunc
	wg   sync.WaitGroup
	done chan struct{} // closed once Close has finished

	mu      sync.Mutex
	conn    *clientwire.ClientConn // nil while (re)connecting
	welcome clientwire.Welcome
	ready   chan struct{} // closed when conn is set; replaced when it is lost
	// cleared is closed when conn, having ended, is taken away: until
	// then current must not hand out the dead connection.
	cleared chan struct{}
	next    int      // index in order of the member to try next
	order   []string // cfg.Members, shuffled
	addr    string   // the address of conn's member (the last connected)
	learned []string // addresses its members gave (client_members.go)
	closed  bool

	ka      *clientKeeper
	once    clientProposer
	watches *watchMerger
	cache   *clientCache // nil: no ClientConfig.Cache
	probes  spi.Probes
}

// Connect connects to one of cfg.Members (tried in a random order) and
// returns the client. It fails if none accepts within ctx, or at once on
// a configuration error. The client keeps itself connected until Close.
func Connect(ctx context.Context, cfg ClientConfig) (*Client, error) {
	var cred transport.ClientCredential
	if cfg.Credential != "" {
		var err error
		if cred, err = transport.ParseClientCredential(cfg.Credential); err != nil {
			return nil, fmt.Errorf("%w: ClientConfig.Credential: %w", ErrInvalidConfig, err)
		}
		switch {
		case cfg.TLS != nil || cfg.Secret != nil:
			return nil, fmt.Errorf("%w: ClientConfig.Credential, TLS and Secret are exclusive", ErrInvalidConfig)
		case cfg.Name == "":
			cfg.Name = cred.Name
		case cfg.Name != cred.Name:
			return nil, fmt.Errorf("%w: ClientConfig.Credential is %q's, not %q's", ErrInvalidConfig, cred.Name, cfg.Name)
		}
	}
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: ClientConfig.Name is empty", ErrInvalidConfig)
	}
	if len(cfg.Members) == 0 {
		return nil, fmt.Errorf("%w: ClientConfig.Members is empty", ErrInvalidConfig)
	}
	if cfg.TLS != nil && cfg.Secret != nil {
		return nil, fmt.Errorf("%w: ClientConfig.TLS and Secret are exclusive", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{cfg: cfg, log: cfg.Logger.With("client", cfg.Name), ready: make(chan struct{}),
		done: make(chan struct{}), once: newClientProposer()}
	c.cellOps = &cellOps{b: clientBackend{c}, self: c}
	switch {
	case cfg.Credential != "":
		t, err := cred.TLS()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		c.tlsCfg = unauthenticatedOnFailure(t)
	case cfg.Secret != nil:
		t, err := transport.ClientSecretTLS(cfg.Secret, cfg.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		c.log.Warn("ClientConfig.Secret is deprecated: whoever holds the client secret can connect as any client; " +
			"give this client its own Credential (IssueClientCredential) instead")
		c.tlsCfg = memberVerifying(t)
	case cfg.TLS != nil:
		c.tlsCfg = memberVerifying(cfg.TLS)
	}
	var err error
	if c.cache, err = newClientCache(c, cfg); err != nil {
		return nil, err
	}
	c.order = append([]string(nil), cfg.Members...)
	rand.Shuffle(len(c.order), func(i, j int) { c.order[i], c.order[j] = c.order[j], c.order[i] })
	conn, err := c.dialRound(ctx, "")
	if err != nil {
		return nil, err
	}
	c.life, c.stop = context.WithCancel(context.Background())
	c.ka = newClientKeeper(c)
	c.watches = newWatchMerger(c)
	c.setConn(conn)
	c.learnMembers(ctx, conn)
	c.wg.Go(func() { c.supervise(conn) })
	c.wg.Go(c.ka.run)
	c.cache.start()
	return c, nil
}

// memberVerifying adapts a TLS config for dialling members by address:
// with no ServerName, the member's chain is verified against RootCAs for
// server use, and its name is not checked (any member of the cell will
// do; the chain proves it is one).
func memberVerifying(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	if c.ServerName != "" {
		return c
	}
	c.InsecureSkipVerify = true // verified in VerifyConnection
	user := cfg.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: the member presented no certificate", ErrUnauthenticated)
		}
		opts := x509.VerifyOptions{Roots: cfg.RootCAs, Intermediates: x509.NewCertPool(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("%w: member certificate: %w", ErrUnauthenticated, err)
		}
		if user != nil {
			return user(cs)
		}
		return nil
	}
	return c
}

// unauthenticatedOnFailure makes cfg's own check of the member fail
// with ErrUnauthenticated, as memberVerifying's does.
func unauthenticatedOnFailure(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	verify := cfg.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := verify(cs); err != nil {
			return fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		return nil
	}
	return c
}

// dialRound tries each member once (candidates: the configured ones
// from the one after the last connected, then the learned ones, avoid
// last) and returns the first connection made. It fails with ErrNoQuorum
// (no member reachable, or every one refused as unable to serve)
// wrapping what each said, or with a refusal's own sentinel when every
// member refused the same way.
func (c *Client) dialRound(ctx context.Context, avoid string) (*clientwire.ClientConn, error) {
	var errs []error
	for _, addr := range c.candidates(avoid) {
		conn, err := c.dial(ctx, addr)
		if err == nil {
			c.connectedTo(addr)
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: connecting to a member: %w", ErrNoQuorum, ctx.Err())
		}
		if errors.Is(err, ErrForbidden) || errors.Is(err, ErrInvalidConfig) {
			return nil, err // the same everywhere: trying on would not help
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("%w: no member accepted the client: %w", ErrNoQuorum, errors.Join(errs...))
}

// dial connects and handshakes with the member at addr.
func (c *Client) dial(ctx context.Context, addr string) (*clientwire.ClientConn, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		raw net.Conn
		err error
	)
	if c.cfg.Dial != nil {
		raw, err = c.cfg.Dial(dctx, addr)
	} else {
		raw, err = (&net.Dialer{}).DialContext(dctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if c.tlsCfg != nil {
		tc := tls.Client(raw, c.tlsCfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			_ = raw.Close()
			if tlsRefused(err) {
				return nil, fmt.Errorf("%w: the member refused the handshake: %w", ErrUnauthenticated, err)
			}
			return nil, err
		}
		raw = tc
	}
	conn, err := clientwire.Handshake(dctx, raw, clientwire.ClientOptions{
		Name:   c.cfg.Name,
		Logger: c.log,
		OnKeepAliveAck: func(a *clientwire.KeepAliveAck) {
			if c.ka != nil {
				c.ka.onAck(a)
			}
		},
	})
	if err != nil {
		if tlsRefused(err) {
			// Under TLS 1.3 the member checks the client's certificate
			// after the client's side of the handshake is done: its
			// refusal is an alert read here.
			return nil, fmt.Errorf("%w: the member refused the client's certificate: %w", ErrUnauthenticated, err)
		}
		return nil, errFromRefusal(err)
	}
	return conn, nil
}

// tlsRefused reports whether err is a TLS alert the member sent, which
// crypto/tls reports as a net.OpError whose Op is "remote error".
func tlsRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

func (c *Client) setConn(conn *clientwire.ClientConn) {
	c.mu.Lock()
	c.conn, c.welcome = conn, conn.Welcome()
	c.cleared = make(chan struct{})
	close(c.ready)
	c.mu.Unlock()
	c.log.Debug("connected", "member", c.welcome.Member)
}

// current waits for a connection, for ctx, or for Close.
func (c *Client) current(ctx context.Context) (*clientwire.ClientConn, error) {
	for {
		c.mu.Lock()
		conn, ready, cleared, closed := c.conn, c.ready, c.cleared, c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if conn != nil {
			select {
			case <-conn.Done():
				// Ended, and about to be replaced: wait for that rather
				// than send on it.
				ready = cleared
			default:
				return conn, nil
			}
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: no member connected: %w", ErrNoQuorum, ctx.Err())
		case <-c.life.Done():
			return nil, ErrClosed
		}
	}
}

// Close ends the client: its sessions end locally with ErrClosed (in the
// cell they expire after their TTL; Close them first to end them at
// once), its watches with ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	c.ka.close()
	c.watches.close()
	close(c.done)
	return nil
}

// Done is closed once Close has finished.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns ErrClosed once the client is closed, nil before: a client
// does not give up on its own while Close has not been called.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// Member returns the name of the member the client talks to now, or ""
// while it is between members.
func (c *Client) Member() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return ""
	}
	return c.welcome.Member
}

func (c *Client) electionTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.welcome.ElectionTimeout
}

// limits are bounds the client can check without knowing the member's
// configuration: nothing longer than the member reads in one frame can
// be sent. The member checks every request against its own limits (it
// trusts no client to) and answers the same sentinels a *Node returns,
// so a bad key or value fails the same way on both, one round trip later.
func (c *Client) inputLimits() spi.Limits {
	c.mu.Lock()
	frame := int(c.welcome.MaxFrame)
	c.mu.Unlock()
	return spi.Limits{MaxKey: frame, MaxValue: frame, MaxTxnOps: 1 << 16}
}

func (c *Client) propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	if cmd.Kind == command.KindTxn && cmd.Txn != nil && cmd.Txn.ReadOnly() {
		data, err := command.Encode(cmd)
		if err != nil {
			return command.Result{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		return c.proposeRead(ctx, data)
	}
	seq := c.once.stamp(cmd)
	data, err := command.Encode(cmd)
	if err != nil {
		c.once.done(seq)
		return command.Result{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	res, err := c.proposeOnce(ctx, cmd, data)
	var amb *AmbiguousError
	if errors.As(err, &amb) {
		c.once.pin(seq)
	} else {
		c.once.done(seq)
	}
	if err != nil {
		return command.Result{}, err
	}
	if err := spi.ResultErr(cmd, res); err != nil {
		return res, err
	}
	c.cache.wrote(cmd, res)
	return res, nil
}

// proposeOnce sends the encoded cmd until a member answers it: the
// command names its proposer (this client, or the caller's idempotency
// key), so the cell applies it once however many members it went
// through, and a connection that ended, or a member that could not
// finish it, only means it is sent again through the next one. It ends
// with an *AmbiguousError only when ctx ends after the command may have
// reached the cell.
func (c *Client) proposeOnce(ctx context.Context, cmd *command.Command, data []byte) (command.Result, error) {
	sent := false
	gaveUp := func(cause error) error {
		if !sent {
			return fmt.Errorf("%w: %w", ErrNoQuorum, cause)
		}
		p := *cmd.Proposer
		p.Floor = 0
		return &AmbiguousError{ID: WriteID{p: p}, Err: cause}
	}
	for {
		conn, err := c.current(ctx)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				if sent {
					return command.Result{}, gaveUp(err)
				}
				return command.Result{}, err
			}
			return command.Result{}, gaveUp(ctx.Err())
		}
		res, err := conn.Propose(ctx, data)
		if err == nil {
			return res.Result, nil
		}
		var we *clientwire.Error
		coded := errors.As(err, &we)
		if coded && we.Code != clientwire.CodeAmbiguous && we.Code != clientwire.CodeClosed {
			// A member's certain answer (the command was refused, or
			// failed as it would on a member).
			return command.Result{}, errFromCode(we.Code, we.Message)
		}
		// The member took it into the cell (unless it answered that it
		// is closing, before handing it on), then could not see it to
		// the end, or the connection ended under it.
		sent = sent || !memberClosing(err)
		if ctx.Err() != nil {
			return command.Result{}, gaveUp(ctx.Err())
		}
		if coded && we.Code == clientwire.CodeAmbiguous {
			// The member is alive but could not finish (it is leaving):
			// a moment, then again, through it or the next one.
			select {
			case <-conn.Done():
			case <-time.After(c.electionTimeout() / 10):
			case <-ctx.Done():
				return command.Result{}, gaveUp(ctx.Err())
			}
			continue
		}
		if err := waitConnEnd(ctx, conn); err != nil {
			return command.Result{}, gaveUp(err)
		}
	}
}

// settle makes the client's sessions current before a waiter decides
// whether its key went with its session: one keep-alive round for all of
// them, whose ack names every session the cell has ended (the member
// answers it after the leader has heard it, so after any end the
// waiter's watch saw). Bounded by an election timeout.
func (c *Client) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.electionTimeout())
	defer cancel()
	c.ka.sync(ctx)
}
