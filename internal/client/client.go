package client

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
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/transport"
)

// Config is the root's ClientConfig, field for field (the root converts
// one into the other; its documentation is there).
type Config struct {
	Name          string
	Members       []string
	Credential    string
	TLS           *tls.Config
	Secret        []byte
	Dial          func(ctx context.Context, addr string) (net.Conn, error)
	Logger        *slog.Logger
	Cache         []string
	CacheMaxBytes int64
}

// Client is a process's way into a cell it is not a member of (the
// root's Client is its handle): a connection to one member at a time,
// failover to another, the keep-alive of its sessions folded into its
// member's batch, merged watches and the cache. It implements
// spi.Backend. It is safe for concurrent use.
type Client struct {
	cfg    Config
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
	learned []string // addresses its members gave (members.go)
	closed  bool

	ka      *clientKeeper
	once    clientProposer
	watches *watchMerger
	cache   *clientCache // nil: no Config.Cache
	probes  spi.Probes
}

var _ spi.Backend = (*Client)(nil)

// Connect connects to one of cfg.Members (tried in a random order) and
// returns the client. It fails if none accepts within ctx, or at once on
// a configuration error. The client keeps itself connected until Close.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	var cred transport.ClientCredential
	if cfg.Credential != "" {
		var err error
		if cred, err = transport.ParseClientCredential(cfg.Credential); err != nil {
			return nil, fmt.Errorf("%w: ClientConfig.Credential: %w", errs.InvalidConfig, err)
		}
		switch {
		case cfg.TLS != nil || cfg.Secret != nil:
			return nil, fmt.Errorf("%w: ClientConfig.Credential, TLS and Secret are exclusive", errs.InvalidConfig)
		case cfg.Name == "":
			cfg.Name = cred.Name
		case cfg.Name != cred.Name:
			return nil, fmt.Errorf("%w: ClientConfig.Credential is %q's, not %q's", errs.InvalidConfig, cred.Name, cfg.Name)
		}
	}
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: ClientConfig.Name is empty", errs.InvalidConfig)
	}
	if len(cfg.Members) == 0 {
		return nil, fmt.Errorf("%w: ClientConfig.Members is empty", errs.InvalidConfig)
	}
	if cfg.TLS != nil && cfg.Secret != nil {
		return nil, fmt.Errorf("%w: ClientConfig.TLS and Secret are exclusive", errs.InvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{cfg: cfg, log: cfg.Logger.With("client", cfg.Name), ready: make(chan struct{}),
		done: make(chan struct{}), once: newClientProposer()}
	switch {
	case cfg.Credential != "":
		t, err := cred.TLS()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errs.InvalidConfig, err)
		}
		c.tlsCfg = unauthenticatedOnFailure(t)
	case cfg.Secret != nil:
		t, err := transport.ClientSecretTLS(cfg.Secret, cfg.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errs.InvalidConfig, err)
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
			return fmt.Errorf("%w: the member presented no certificate", errs.Unauthenticated)
		}
		opts := x509.VerifyOptions{Roots: cfg.RootCAs, Intermediates: x509.NewCertPool(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("%w: member certificate: %w", errs.Unauthenticated, err)
		}
		if user != nil {
			return user(cs)
		}
		return nil
	}
	return c
}

// unauthenticatedOnFailure makes cfg's own check of the member fail
// with errs.Unauthenticated, as memberVerifying's does.
func unauthenticatedOnFailure(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	verify := cfg.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := verify(cs); err != nil {
			return fmt.Errorf("%w: %w", errs.Unauthenticated, err)
		}
		return nil
	}
	return c
}

// dialRound tries each member once (candidates: the configured ones
// from the one after the last connected, then the learned ones, avoid
// last) and returns the first connection made. It fails with errs.NoQuorum
// (no member reachable, or every one refused as unable to serve)
// wrapping what each said, or with a refusal's own sentinel when every
// member refused the same way.
func (c *Client) dialRound(ctx context.Context, avoid string) (*clientwire.ClientConn, error) {
	var failures []error
	for _, addr := range c.candidates(avoid) {
		conn, err := c.dial(ctx, addr)
		if err == nil {
			c.connectedTo(addr)
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: connecting to a member: %w", errs.NoQuorum, ctx.Err())
		}
		if errors.Is(err, errs.Forbidden) || errors.Is(err, errs.InvalidConfig) {
			return nil, err // the same everywhere: trying on would not help
		}
		failures = append(failures, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("%w: no member accepted the client: %w", errs.NoQuorum, errors.Join(failures...))
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
				return nil, fmt.Errorf("%w: the member refused the handshake: %w", errs.Unauthenticated, err)
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
			return nil, fmt.Errorf("%w: the member refused the client's certificate: %w", errs.Unauthenticated, err)
		}
		return nil, clientwire.RefusalError(err)
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
			return nil, errs.Closed
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
			return nil, fmt.Errorf("%w: no member connected: %w", errs.NoQuorum, ctx.Err())
		case <-c.life.Done():
			return nil, errs.Closed
		}
	}
}

// Close ends the client: its sessions end locally with errs.Closed (in the
// cell they expire after their TTL; Close them first to end them at
// once), its watches with errs.Closed. Close is idempotent.
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

// Err returns errs.Closed once the client is closed, nil before: a client
// does not give up on its own while Close has not been called.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errs.Closed
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

func (c *Client) ElectionTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.welcome.ElectionTimeout
}

// Limits are bounds the client can check without knowing the member's
// configuration: nothing longer than the member reads in one frame can
// be sent. The member checks every request against its own limits (it
// trusts no client to) and answers the same sentinels a *Node returns,
// so a bad key or value fails the same way on both, one round trip later.
func (c *Client) Limits() spi.Limits {
	c.mu.Lock()
	frame := int(c.welcome.MaxFrame)
	c.mu.Unlock()
	return spi.Limits{MaxKey: frame, MaxValue: frame, MaxTxnOps: 1 << 16}
}

// clientWatchBuffer is a client watch's channel: each watcher queues in
// the client (see downstream), so the channel only hands events over,
// and a client holding many watches does not pay a member's buffer for
// each (a member's 64 events are some 7 KB; 8 were 1 KB a watch, two
// are 320 bytes).
const clientWatchBuffer = 2

func (c *Client) WatchBuffer() int { return clientWatchBuffer }

func (c *Client) Propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	if cmd.Kind == command.KindTxn && cmd.Txn != nil && cmd.Txn.ReadOnly() {
		data, err := command.Encode(cmd)
		if err != nil {
			return command.Result{}, fmt.Errorf("%w: %w", errs.InvalidArgument, err)
		}
		return c.proposeRead(ctx, data)
	}
	seq := c.once.stamp(cmd)
	data, err := command.Encode(cmd)
	if err != nil {
		c.once.done(seq)
		return command.Result{}, fmt.Errorf("%w: %w", errs.InvalidArgument, err)
	}
	res, err := c.proposeOnce(ctx, cmd, data)
	var amb *spi.AmbiguousError
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
			return fmt.Errorf("%w: %w", errs.NoQuorum, cause)
		}
		p := *cmd.Proposer
		p.Floor = 0
		return &spi.AmbiguousError{Proposer: p, Err: cause}
	}
	// No member to send it to, or ctx ended while waiting for one.
	giveUp := func(err error) error {
		switch {
		case errors.Is(err, errs.Closed) && !sent:
			return err
		case errors.Is(err, errs.Closed):
			return gaveUp(err)
		}
		return gaveUp(ctx.Err())
	}
	var res command.Result
	err := c.failover(ctx, giveUp, func(conn *clientwire.ClientConn) (next, error) {
		r, err := conn.Propose(ctx, data)
		if err == nil {
			res = r.Result
			return nextAnswered, nil
		}
		var we *clientwire.Error
		coded := errors.As(err, &we)
		// CodeCanceled while ctx lives: the member ended the request
		// itself (it is dropping the connection, or stopping), which says
		// no more than CodeAmbiguous does.
		unfinished := coded && (we.Code == clientwire.CodeAmbiguous ||
			we.Code == clientwire.CodeCanceled && ctx.Err() == nil)
		if coded && !unfinished && we.Code != clientwire.CodeClosed {
			if !sent || !clientwire.Passing(we.Code) {
				// A member's certain answer (the command was refused, or
				// failed as it would on a member).
				return nextAnswered, clientwire.ErrorOf(we.Code, we.Message)
			}
			// This member did not take this copy (it has no quorum, is
			// catching up, is overloaded), but an earlier copy may be in
			// the cell: "not applied" would be a guess. Again, through
			// this member or the next, until an answer or ctx's end.
			unfinished = true
		}
		sent = sent || mayHaveReached(err)
		if ctx.Err() != nil {
			return nextAnswered, gaveUp(ctx.Err())
		}
		if unfinished {
			// The member is alive but could not finish (it is leaving):
			// a moment, then again, through it or the next one.
			return nextPause, nil
		}
		return nextMember, nil
	})
	return res, err
}

// mayHaveReached reports whether a copy of a write that ended with err
// may have reached the cell: the connection ended under it, or the member
// took it into the cell and could not see it to the end; not when the
// member answered that it did not take it (it is closing, has no quorum,
// is catching up or overloaded).
func mayHaveReached(err error) bool {
	var we *clientwire.Error
	if !errors.As(err, &we) {
		return true
	}
	switch we.Code {
	case clientwire.CodeClosed, clientwire.CodeNoQuorum, clientwire.CodeNoLeader, clientwire.CodeNotLeader,
		clientwire.CodeNotCaughtUp, clientwire.CodeTooManyRequests:
		return false
	}
	return true
}

// settle makes the client's sessions current before a waiter decides
// whether its key went with its session: one keep-alive round for all of
// them, whose ack names every session the cell has ended (the member
// answers it after the leader has heard it, so after any end the
// waiter's watch saw). Bounded by an election timeout.
func (c *Client) Settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.ElectionTimeout())
	defer cancel()
	c.ka.sync(ctx)
}
