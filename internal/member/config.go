package member

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
)

// Config is the root's Config as the runtime reads it: validated, every
// default filled (the root does both; its documentation of each field is
// there), the nested types the runtime's own.
type Config struct {
	Name      string
	DataDir   string
	Addr      string
	Transport transport.Transport
	Peers     []Peer
	Join      bool
	CellName  string

	TickInterval   time.Duration
	ElectionTicks  int
	HeartbeatTicks int

	MaxKeySize   int
	MaxValueSize int
	MaxTxnOps    int
	MaxFrameSize int
	QuotaBytes   int64
	MaxReadBytes int

	CompactEvery     uint64
	CatchUpEntries   uint64
	HistoryRevisions int64

	TLS     *tls.Config
	Secret  []byte
	Metrics prometheus.Registerer
	Logger  *slog.Logger
	Disk    *storage.MemDisk

	ClientAddr             string
	ClientSecret           []byte
	ClientPolicy           func(identity string) (Grant, error)
	ClientRevoked          map[string]uint64
	MaxClients             int
	ClientMaxInFlight      int
	ClientMaxWatchers      int
	ClientMaxSessions      int
	MaxSessionTTL          time.Duration
	ClientHandshakeTimeout time.Duration
	ClientMaxPending       int
	ClientMaxPerIdentity   int
	ClientIdleTimeout      time.Duration
	ClientIOTimeout        time.Duration
	ClientQueueBytes       int
	ClientQueueBytesTotal  int64

	Gossip *GossipConfig
}

// GossipCarrier is a Config.Transport that carries gossip as well:
// coordtest's in-memory network, whose members then gossip over it
// rather than UDP and TCP. The member finds it by type assertion, as
// database/sql finds a driver's optional interfaces, so that no exported
// configuration of the root names a gossip transport.
type GossipCarrier interface {
	transport.Transport
	// GossipTransport is the transport gossip runs over.
	GossipTransport() memberlist.Transport
}

// gossipTransport is the transport gossip runs over in place of UDP and
// TCP, nil for those.
func (c *Config) gossipTransport() memberlist.Transport {
	if gc, ok := c.Transport.(GossipCarrier); ok {
		return gc.GossipTransport()
	}
	return nil
}

// Peer is a founding voter: its member name and transport address.
type Peer struct {
	Name string
	Addr string
}

// GossipConfig is the root's GossipConfig. coordtest's in-memory gossip
// arrives through Config.Transport instead (GossipCarrier).
type GossipConfig struct {
	BindAddr        string
	AdvertiseAddr   string
	Seeds           []string
	Keys            [][]byte
	Zone            string
	NoVote          bool
	BootstrapExpect int
	ProbeInterval   time.Duration
	ProbeTimeout    time.Duration
	GossipInterval  time.Duration
	// PushPullInterval is how often a member exchanges its whole view
	// with another; 0 = gossip's default.
	PushPullInterval time.Duration
	Autopilot        AutopilotConfig
}

// AutopilotConfig is the root's AutopilotConfig.
type AutopilotConfig struct {
	Disabled      bool
	Voters        int
	Stabilization time.Duration
	DeadThreshold time.Duration
	Interval      time.Duration
}

// Grant is the root's Grant: where a client may write.
type Grant struct {
	WritePrefixes []string
	Admin         bool
}

// Sizes that tie the limits together; the root's Config validation holds
// the limits to them.
const (
	// MaxSizePerMsg is how many bytes of entries Raft batches into one
	// append; one entry larger than that still goes alone.
	MaxSizePerMsg = 1 << 20
	// FrameOverhead bounds a frame's envelope, Raft message and entry
	// headers besides the commands.
	FrameOverhead = 64 << 10
)
