package coord

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/member"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
)

// Peer is a founding voter of the cell: its stable member name and its
// transport address.
type Peer struct {
	Name string
	Addr string
}

// Config configures a Node. The zero value of every field but Name is
// usable: it gets the default written beside the field. A Config is read
// once, by Open.
type Config struct {
	// Name is this member's stable, unique name in the cell. Required.
	// The member's Raft ID derives from it, so never reuse a name for a
	// different member's data.
	Name string
	// DataDir is the Pebble directory. "" keeps all state in memory (lost
	// on Close, unless Disk is kept; see Disk).
	DataDir string
	// Addr is this member's transport address, e.g. "127.0.0.1:7001",
	// used when Transport is nil.
	Addr string
	// Transport carries messages between members. nil = TCP on Addr,
	// dialing Peers' addresses (mutual TLS when TLS is set). coordtest
	// passes an in-memory transport, which with Gossip carries the
	// members' gossip too.
	Transport transport.Transport
	// Peers are the founding voters, the same list (including this member)
	// on every founding member. Empty = a cell of this member alone. Once
	// the member has state on disk, the cell's own record of its members
	// (kept through every membership change) takes precedence.
	Peers []Peer
	// Join starts a member that was added to an existing cell (AddLearner)
	// instead of founding one: it starts empty and catches up from the
	// leader. Peers then lists (some of) the cell's current members, so it
	// can reach them. Join matters only the first time: once the member
	// has state, its data directory knows which cell it belongs to.
	Join bool
	// CellName names the cell. With the founding Peers it makes the cell
	// ID that every message carries: members drop what another cell says.
	// Leave it empty unless a new cell may be founded with the same
	// Peers (names and addresses) as another that may still be running,
	// say a test that re-creates a cell on the same ports; then give each
	// incarnation its own name. Only founders read it.
	CellName string

	// TickInterval is the Raft tick. Default 100ms.
	TickInterval time.Duration
	// ElectionTicks is the election timeout in ticks. Default 10 (1s with
	// the default tick). Must be greater than HeartbeatTicks.
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat interval in ticks. Default 1.
	HeartbeatTicks int

	// MaxKeySize bounds keys in bytes. Default 4 KiB.
	MaxKeySize int
	// MaxValueSize bounds values in bytes. Default 64 KiB.
	MaxValueSize int
	// MaxTxnOps bounds the operations of one transaction. Default 128.
	// MaxTxnOps × (MaxKeySize + MaxValueSize) must fit in a frame (see
	// MaxFrameSize): a command that cannot be sent could never commit.
	MaxTxnOps int
	// MaxFrameSize bounds one message between members, in bytes, on the
	// TCP transport (both ways). Default 16 MiB; it must hold the largest
	// transaction the limits above allow, plus 1 MiB of Raft batching.
	MaxFrameSize int
	// QuotaBytes bounds the keyspace (keys plus values). Past it, writes
	// that grow it fail with ErrQuotaExceeded; deletes still work.
	// Default 2 GiB. Each member keeps the live keyspace in memory (with
	// about 100 to 130 bytes per key on top), so this is also the bound
	// on its memory: set it to what each member, and each process
	// hosting several, can spare.
	QuotaBytes int64
	// MaxReadBytes bounds what one read may return, counted as its keys
	// and values plus 64 bytes per key: a List (or one page of it), and
	// the gets of one transaction. Past it the read fails with
	// ErrReadTooLarge, having read no more than the bound, and a
	// transaction changes nothing; page a List with Limit and After.
	// Default DefaultMaxReadBytes. For a transaction that writes, the
	// bound travels with it in the log, so every member applies it alike
	// whatever its own setting; a client's reads are also bounded by what
	// one frame to it holds.
	MaxReadBytes int

	// CompactEvery is how many applied entries trigger a Raft log
	// compaction. Default 10,000.
	CompactEvery uint64
	// CatchUpEntries is how many entries a compaction keeps for followers
	// that lag a little (they catch up from the log, not a snapshot).
	// Default 5,000.
	CatchUpEntries uint64
	// HistoryRevisions is how many revisions of change history the member
	// keeps for watches that resume from an old revision. Default 100,000.
	HistoryRevisions int64

	// TLS, when set, secures the default TCP transport with mutual TLS:
	// set Certificates, RootCAs, ClientCAs and ClientAuth =
	// tls.RequireAndVerifyClientCert. Each member's certificate must name
	// it (a DNS or URI SAN, or the common name, equal to its member name):
	// a certificate signed by the CA for another name, or for a name that
	// is not a member, gets nothing. See SECURITY.md.
	TLS *tls.Config
	// Secret, when set (32 bytes or more, the same on every member),
	// authenticates members without a PKI: the TCP transport derives
	// mutual TLS from it. Use it or TLS unless the members' port is
	// reachable by members only; without either, anyone who can reach
	// the port can speak for any member (Open logs a warning).
	Secret []byte
	// Metrics, when set, receives the member's metrics (named coord_*;
	// see Admin.RegisterMetrics for what they cost and their labels).
	// nil = no metrics. Open registers them; a registerer that already
	// holds a member's metrics makes Open fail, so a process hosting
	// several members wraps each with prometheus.WrapRegistererWith
	// (a member label). Serve them with Handler(WithMetricsGatherer(g)).
	Metrics prometheus.Registerer
	// Logger receives the member's logs. nil = discard.
	Logger *slog.Logger
	// Disk is the in-memory disk used when DataDir is "". nil = a fresh
	// one. Tests keep it to restart a member on what it had synced.
	Disk *storage.MemDisk

	// ClientAddr, when set, is where Open listens for processes that are
	// not members (Connect), e.g. "127.0.0.1:7101" (port 0 picks one; see
	// Admin.ClientAddr). It is a listener of its own, never the members'
	// transport. With TLS, Secret or ClientSecret it is mutual TLS (a
	// client's identity is the name its certificate or credential
	// proves); without, plaintext
	// (a client's identity is the name it gives; Open logs a warning).
	// "" = no client listener; the host may still call ServeClients.
	ClientAddr string
	// ClientSecret, when set (32 bytes or more, the same on every
	// member), authenticates clients apart from members. It is the
	// operator's, never a client's: IssueClientCredential (or `coordctl
	// client issue`) derives from it one credential per client, which
	// proves that client's name and no other (ClientConfig.Credential).
	// The client port presents a certificate from a CA derived from it
	// (transport.ClientSecretCA), which clients verify members with, and
	// takes credentials, certificates of that CA (ClientConfig.Secret,
	// deprecated: a holder of the secret can claim any name), and
	// certificates of the members' own CA under TLS or Secret. Neither a
	// credential nor a certificate of the client CA passes the members'
	// transport: a client never speaks for a member. Unset with Secret
	// set, it is Secret (credentials are then issued from the member
	// secret, which still stays with the members), and under TLS alone
	// the port presents and trusts the TLS configuration's certificates.
	// With ClientSecret and TLS, a client using ClientConfig.TLS needs
	// transport.ClientSecretCA(ClientSecret) among its RootCAs. See
	// SECURITY.md for who can claim which identity.
	ClientSecret []byte
	// ClientPolicy, when set, decides which clients may connect and where
	// they may write: it is called once per connection with the client's
	// identity, and an error refuses the client with that reason. nil =
	// every client that authenticates may connect and write any key (of
	// its own sessions, for ephemeral keys: see ClientGrant.Admin).
	ClientPolicy func(identity string) (ClientGrant, error)
	// ClientRevoked revokes client credentials (IssueClientCredential):
	// a credential of name N and generation G is refused when G <=
	// ClientRevoked[N]. To replace a lost or leaked credential, issue N's
	// next generation, deploy it, then raise ClientRevoked[N] on every
	// member; Admin.SetClientRevoked does so while a member runs, and ends
	// the connections revoked credentials hold. Other clients are not
	// touched. It lives in each member's configuration, beside the client
	// secret it answers to, rather than in the replicated state: it then
	// holds on a member cut off from the others (which still serves
	// serializable reads and watches), cannot be undone through the
	// client door, and leaves the replicated formats alone. It does not
	// apply to certificates from a CA (Config.TLS): refuse those with
	// ClientPolicy. nil = nothing revoked.
	ClientRevoked map[string]uint64
	// MaxClients bounds the clients this member serves at once; one more
	// is refused (ErrOverloaded on its side). Default DefaultMaxClients.
	MaxClients int
	// ClientMaxInFlight bounds the requests of one client running at
	// once on this member; beyond, ErrOverloaded. Default
	// DefaultClientMaxInFlight.
	ClientMaxInFlight int
	// ClientMaxWatchers bounds the watches one client keeps open on this
	// member; beyond, ErrOverloaded. Default DefaultClientMaxWatchers.
	ClientMaxWatchers int
	// ClientMaxSessions bounds the live sessions one client identity may
	// hold in the cell when it creates one through this member: the count
	// is the replicated state's, over every member, so a client cannot
	// spread past it; one more is refused with ErrTooManySessions.
	// Default DefaultClientMaxSessions. A member's own sessions (its
	// host's, which is trusted) have no such bound; QuotaBytes bounds
	// them with everything else.
	ClientMaxSessions int
	// MaxSessionTTL bounds the TTL a session may ask for (WithTTL, a
	// Lease's, a client's); a longer one is refused with ErrInvalidTTL.
	// Default DefaultMaxSessionTTL (one hour). A long TTL saves nothing
	// while the holder lives (keep-alives are batched, one message per
	// member per interval whatever the sessions), but an abandoned
	// session and its locks live that long: this bounds it.
	MaxSessionTTL time.Duration
	// ClientHandshakeTimeout bounds a client connection's handshake, TLS
	// and the protocol's Hello together, from its accept; a connection
	// that has not finished by then is closed. Default 5s.
	ClientHandshakeTimeout time.Duration
	// ClientMaxPending bounds the client connections in their handshake
	// at once, and a quarter of it (at least 1) those from one remote
	// address. A new connection is always taken: when a bound is full,
	// the oldest handshake under it is dropped, so silent connections
	// cannot hold the door shut, and those from one address never drop
	// another address's. Default DefaultClientMaxPending.
	ClientMaxPending int
	// ClientMaxPerIdentity bounds the connections one client identity
	// holds on this member at once; one more is refused (ErrOverloaded
	// on its side). Default DefaultClientMaxPerIdentity.
	ClientMaxPerIdentity int
	// ClientIdleTimeout closes a client connection that sent nothing for
	// that long (a Client pings every half election timeout). Default
	// 30s, or four election timeouts if that is longer.
	ClientIdleTimeout time.Duration
	// ClientIOTimeout bounds a stalled client: a frame it started must
	// arrive whole, and each write to it complete, within ClientIOTimeout
	// plus the frame's size at 1 MiB/s; else its connection is closed.
	// Default 10s.
	ClientIOTimeout time.Duration
	// ClientQueueBytes bounds the bytes queued unwritten for one client
	// (raised to twice the longest frame it may be sent, at most
	// MaxFrameSize): a watch that falls behind ends (ErrSlowWatcher)
	// before three quarters of it are used, and a client that still does
	// not read is cut off, never buffered without bound. Default
	// DefaultClientQueueBytes.
	ClientQueueBytes int
	// ClientQueueBytesTotal bounds the bytes queued unwritten for all of
	// this member's clients together (raised to twice MaxFrameSize):
	// past it the client with the longest queue is cut off. Default
	// DefaultClientQueueBytesTotal.
	ClientQueueBytesTotal int64

	// Gossip, when set, lets members find each other by gossip
	// (hashicorp/memberlist) instead of static Peers, found the cell
	// themselves (BootstrapExpect) and keep it in shape (autopilot). See
	// GossipConfig; nil = static Peers and manual membership.
	Gossip *GossipConfig
}

// GossipConfig lets the cell find its members by gossip
// (hashicorp/memberlist) and shape itself: with it, a member needs no
// static Peers, only the address of any other member to gossip with.
type GossipConfig struct {
	// BindAddr is the UDP and TCP address to gossip on, e.g.
	// "0.0.0.0:7946". Required.
	BindAddr string
	// AdvertiseAddr is the gossip address the others reach this member
	// at, when it differs from BindAddr (NAT, 0.0.0.0).
	AdvertiseAddr string
	// Seeds are gossip addresses of (some) other members, tried with
	// backoff until one answers. A member with none waits to be found.
	Seeds []string
	// Keys encrypt gossip (16, 24 or 32 bytes each, AES-GCM); the first
	// encrypts, all decrypt, so keys rotate without a restart (see
	// Admin.GossipKeyring). None = plaintext gossip: set keys unless the
	// gossip port is reachable by members only.
	Keys [][]byte
	// Zone is this member's failure domain (rack, availability zone).
	// Autopilot spreads voters so that, with 3 zones or more, no zone
	// holds a majority of them.
	Zone string
	// NoVote keeps this member a learner (standby) for good.
	NoVote bool
	// BootstrapExpect, on a member with no state, founds a new cell
	// once this many members that may vote, with the same
	// BootstrapExpect, see each other in gossip and none sees an existing
	// cell; exactly that many found it, the rest join it. 0 = never
	// found a cell, only join one found in gossip (or use Peers).
	BootstrapExpect int
	// ProbeInterval is how often a member probes another (default 1s);
	// ProbeTimeout how long it waits for the answer (default 500ms);
	// GossipInterval how often it gossips (default 200ms).
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	GossipInterval time.Duration
	// PushPullInterval is how often a member exchanges its whole view
	// with another (default 30s). Gossip carries most news at once, but
	// when members start together a member's news can miss some of them
	// (sent before they listened), and they then learn of it only at the
	// next exchange: with the default, about one formation in fifty of
	// seven members started at once took 30-57 s to see the last one
	// (coordtest, which sets 1s: the slowest of 300 took 1.8 s).
	PushPullInterval time.Duration
	// Autopilot reshapes the cell from the leader.
	Autopilot AutopilotConfig
}

// AutopilotConfig tunes the autopilot, which runs on the leader and
// makes one membership change at a time. The defaults are Consul's.
type AutopilotConfig struct {
	// Disabled turns it off: membership stays manual (AddLearner,
	// Promote, RemoveMember).
	Disabled bool
	// Voters is the target voter count: 0 = 3, or 5 once at least 5
	// members may vote.
	Voters int
	// Stabilization is how long a learner stays healthy (alive, heard
	// from, caught up) before it is promoted. Default 10s.
	Stabilization time.Duration
	// DeadThreshold is how long a voter must be failed in gossip and
	// unheard by Raft before it is replaced and removed. Default 10s.
	DeadThreshold time.Duration
	// Interval is how often the leader reconsiders. Default 1s.
	Interval time.Duration
}

// ClientGrant is what a member lets one client do (Config.ClientPolicy).
type ClientGrant struct {
	// WritePrefixes are the key prefixes the client may write under: a
	// put, a delete or a prefix delete of a key (or prefix) that starts
	// with one of them. The recipes write under their own prefixes (a
	// Mutex "locks/x" writes under "locks/x", an Election under its
	// name), which the grant covers like any other key. "" grants every
	// key; nil or empty grants none (the client may still read, watch and
	// keep sessions). Reads are not restricted.
	WritePrefixes []string
	// Admin lets the client delete or overwrite, under WritePrefixes,
	// keys of sessions that are not its own (another client's lock,
	// election or ephemeral key), as a member can: for an operator's
	// tool that breaks a stuck lock. Without it a client may write such
	// keys only of its own sessions (ErrForbidden otherwise), so a grant
	// on locks/ lets it queue for a lock, never take one from its
	// holder.
	Admin bool
}

// Defaults of the client limits (Config.MaxClients, ClientMaxInFlight,
// ClientMaxWatchers, ClientMaxSessions). A client's sessions cost the
// cell about 1 KiB each on every member, so the default bound of one
// identity is 4 MiB: four times what bench/'s clients-sessions holds per
// client (1,000).
const (
	DefaultMaxClients        = 1024
	DefaultClientMaxInFlight = 64
	DefaultClientMaxWatchers = 256
	DefaultClientMaxSessions = 4096
)

// Defaults of the client door's bounds (Config.ClientMaxPending,
// ClientMaxPerIdentity, ClientQueueBytes, ClientQueueBytesTotal).
const (
	DefaultClientMaxPending      = 256
	DefaultClientMaxPerIdentity  = 256
	DefaultClientQueueBytes      = 16 << 20
	DefaultClientQueueBytesTotal = 128 << 20
)

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errs.InvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.Name == "" {
		return bad("Name is required")
	}
	seen := map[string]bool{}
	addrs := map[string]string{}
	for _, p := range c.Peers {
		if p.Name == "" {
			return bad("a peer has no name")
		}
		if seen[p.Name] {
			return bad("peer %q listed twice", p.Name)
		}
		seen[p.Name] = true
		if other, dup := addrs[p.Addr]; dup && p.Addr != "" {
			return bad("peers %q and %q have the same address %q", other, p.Name, p.Addr)
		}
		addrs[p.Addr] = p.Name
	}
	if err := c.validatePeers(); err != nil {
		return err
	}
	if c.ClientSecret != nil && len(c.ClientSecret) < transport.MinSecretLen {
		return bad("ClientSecret has %d bytes; it needs at least %d (draw them at random)", len(c.ClientSecret), transport.MinSecretLen)
	}
	if c.ClientAddr != "" {
		if err := member.CheckAddr(c.ClientAddr); err != nil {
			return bad("ClientAddr: %v", err)
		}
	}
	setDefault(&c.TickInterval, 100*time.Millisecond)
	setDefault(&c.ElectionTicks, 10)
	setDefault(&c.HeartbeatTicks, 1)
	setDefault(&c.MaxKeySize, 4<<10)
	setDefault(&c.MaxValueSize, 64<<10)
	setDefault(&c.MaxTxnOps, 128)
	setDefault(&c.MaxFrameSize, transport.DefaultMaxFrameSize)
	setDefault(&c.QuotaBytes, 2<<30)
	setDefault(&c.MaxReadBytes, DefaultMaxReadBytes)
	setDefault(&c.CompactEvery, 10_000)
	setDefault(&c.CatchUpEntries, 5_000)
	setDefault(&c.HistoryRevisions, 100_000)
	setDefault(&c.MaxClients, DefaultMaxClients)
	setDefault(&c.ClientMaxInFlight, DefaultClientMaxInFlight)
	setDefault(&c.ClientMaxWatchers, DefaultClientMaxWatchers)
	setDefault(&c.ClientMaxSessions, DefaultClientMaxSessions)
	setDefault(&c.MaxSessionTTL, DefaultMaxSessionTTL)
	setDefault(&c.ClientHandshakeTimeout, 5*time.Second)
	setDefault(&c.ClientMaxPending, DefaultClientMaxPending)
	setDefault(&c.ClientMaxPerIdentity, DefaultClientMaxPerIdentity)
	setDefault(&c.ClientIdleTimeout, max(30*time.Second, 4*time.Duration(c.ElectionTicks)*c.TickInterval))
	setDefault(&c.ClientIOTimeout, 10*time.Second)
	setDefault(&c.ClientQueueBytes, DefaultClientQueueBytes)
	setDefault(&c.ClientQueueBytesTotal, DefaultClientQueueBytesTotal)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.TickInterval < 0 || c.ElectionTicks < 0 || c.HeartbeatTicks < 0:
		return bad("timings must be positive")
	case c.TickInterval < minTickInterval:
		return bad("TickInterval %v is below the floor of %v", c.TickInterval, minTickInterval)
	case c.ElectionTicks <= c.HeartbeatTicks:
		return bad("ElectionTicks (%d) must exceed HeartbeatTicks (%d)", c.ElectionTicks, c.HeartbeatTicks)
	case c.MaxKeySize < 0 || c.MaxValueSize < 0 || c.MaxTxnOps < 0 || c.QuotaBytes < 0 || c.HistoryRevisions < 0 ||
		c.MaxClients < 0 || c.ClientMaxInFlight < 0 || c.ClientMaxWatchers < 0 || c.ClientMaxSessions < 0 || c.MaxReadBytes < 0,
		c.ClientHandshakeTimeout < 0 || c.ClientMaxPending < 0 || c.ClientMaxPerIdentity < 0 ||
			c.ClientIdleTimeout < 0 || c.ClientIOTimeout < 0 || c.ClientQueueBytes < 0 || c.ClientQueueBytesTotal < 0:
		return bad("limits must be positive")
	case c.MaxSessionTTL < 4*time.Duration(c.ElectionTicks)*c.TickInterval:
		return bad("MaxSessionTTL %v is below the minimum session TTL %v (four election timeouts)",
			c.MaxSessionTTL, 4*time.Duration(c.ElectionTicks)*c.TickInterval)
	case c.CatchUpEntries >= c.CompactEvery:
		return bad("CatchUpEntries (%d) must be less than CompactEvery (%d)", c.CatchUpEntries, c.CompactEvery)
	case c.MaxFrameSize < minFrameSize:
		return bad("MaxFrameSize %d is below the floor of %d", c.MaxFrameSize, minFrameSize)
	case int64(c.MaxTxnOps)*int64(c.MaxKeySize+c.MaxValueSize+opOverhead)+member.MaxSizePerMsg+member.FrameOverhead > int64(c.MaxFrameSize):
		return bad("MaxTxnOps × (MaxKeySize + MaxValueSize) = %d × (%d + %d) does not fit in MaxFrameSize %d "+
			"with 1 MiB of Raft batching: lower a limit or raise MaxFrameSize",
			c.MaxTxnOps, c.MaxKeySize, c.MaxValueSize, c.MaxFrameSize)
	}
	return nil
}

// DefaultMaxReadBytes is Config.MaxReadBytes when it is zero: 4 MiB, what
// one frame to a client holds by default, so a read that works on a
// member works through a client too.
const DefaultMaxReadBytes = 4 << 20

// Sizes that tie the limits together (with member.MaxSizePerMsg and
// member.FrameOverhead, which the runtime uses too).
const (
	// opOverhead bounds an operation's encoding besides its key and value.
	opOverhead   = 64
	minFrameSize = 2 << 20
	// minTickInterval keeps a mistyped tick (nanoseconds for
	// milliseconds) from spinning the Raft loop.
	minTickInterval = time.Millisecond
)

// validatePeers checks the addresses: the TCP transport must be able to
// dial every peer, and this member's own entry must be where it listens.
func (c *Config) validatePeers() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errs.InvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.Join && !slices.ContainsFunc(c.Peers, func(p Peer) bool { return p.Name != c.Name }) {
		return bad("a joining member needs Peers naming members of the cell to reach")
	}
	if c.Transport != nil {
		return nil
	}
	switch {
	case c.TLS != nil && c.Secret != nil:
		return bad("set TLS or Secret, not both")
	case c.Secret != nil && len(c.Secret) < transport.MinSecretLen:
		return bad("Secret has %d bytes; it needs at least %d (draw them at random)", len(c.Secret), transport.MinSecretLen)
	case c.TLS != nil && c.TLS.ClientAuth != tls.RequireAndVerifyClientCert:
		return bad("TLS must be mutual: set ClientAuth to tls.RequireAndVerifyClientCert (and ClientCAs)")
	}
	for _, p := range c.Peers {
		if err := member.CheckAddr(p.Addr); err != nil {
			return bad("peer %q: %v", p.Name, err)
		}
		if p.Name == c.Name {
			if c.Addr == "" {
				c.Addr = p.Addr
			} else if c.Addr != p.Addr {
				return bad("Addr %q differs from this member's entry in Peers (%q)", c.Addr, p.Addr)
			}
		}
	}
	if c.Addr == "" {
		return bad("Addr is required with the TCP transport")
	}
	if err := member.CheckAddr(c.Addr); err != nil {
		return bad("Addr: %v", err)
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// memberConfig is cfg, validated, as the member runtime takes it.
func memberConfig(cfg Config) member.Config {
	m := member.Config{
		Name: cfg.Name, DataDir: cfg.DataDir, Addr: cfg.Addr, Transport: cfg.Transport, Join: cfg.Join,
		CellName: cfg.CellName, TickInterval: cfg.TickInterval, ElectionTicks: cfg.ElectionTicks,
		HeartbeatTicks: cfg.HeartbeatTicks, MaxKeySize: cfg.MaxKeySize, MaxValueSize: cfg.MaxValueSize,
		MaxTxnOps: cfg.MaxTxnOps, MaxFrameSize: cfg.MaxFrameSize, QuotaBytes: cfg.QuotaBytes,
		MaxReadBytes: cfg.MaxReadBytes, CompactEvery: cfg.CompactEvery, CatchUpEntries: cfg.CatchUpEntries,
		HistoryRevisions: cfg.HistoryRevisions, TLS: cfg.TLS, Secret: cfg.Secret, Metrics: cfg.Metrics,
		Logger: cfg.Logger, Disk: cfg.Disk, ClientAddr: cfg.ClientAddr, ClientSecret: cfg.ClientSecret,
		ClientRevoked: cfg.ClientRevoked, MaxClients: cfg.MaxClients, ClientMaxInFlight: cfg.ClientMaxInFlight,
		ClientMaxWatchers: cfg.ClientMaxWatchers, ClientMaxSessions: cfg.ClientMaxSessions,
		MaxSessionTTL: cfg.MaxSessionTTL, ClientHandshakeTimeout: cfg.ClientHandshakeTimeout,
		ClientMaxPending: cfg.ClientMaxPending, ClientMaxPerIdentity: cfg.ClientMaxPerIdentity,
		ClientIdleTimeout: cfg.ClientIdleTimeout, ClientIOTimeout: cfg.ClientIOTimeout,
		ClientQueueBytes: cfg.ClientQueueBytes, ClientQueueBytesTotal: cfg.ClientQueueBytesTotal,
		Peers: memberPeers(cfg.Peers),
	}
	if p := cfg.ClientPolicy; p != nil {
		m.ClientPolicy = func(identity string) (member.Grant, error) {
			g, err := p(identity)
			return member.Grant(g), err
		}
	}
	if g := cfg.Gossip; g != nil {
		m.Gossip = &member.GossipConfig{BindAddr: g.BindAddr, AdvertiseAddr: g.AdvertiseAddr, Seeds: g.Seeds,
			Keys: g.Keys, Zone: g.Zone, NoVote: g.NoVote, BootstrapExpect: g.BootstrapExpect,
			ProbeInterval: g.ProbeInterval, ProbeTimeout: g.ProbeTimeout, GossipInterval: g.GossipInterval,
			PushPullInterval: g.PushPullInterval, Autopilot: member.AutopilotConfig(g.Autopilot)}
	}
	return m
}

func memberPeers(ps []Peer) []member.Peer {
	out := make([]member.Peer, len(ps))
	for i, p := range ps {
		out[i] = member.Peer(p)
	}
	return out
}
