package coord

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/coordcell/coord/internal/errs"
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
	// passes an in-memory transport.
	Transport transport.Transport
	// Peers are the founding voters, the same list (including this member)
	// on every founding member. Empty = a cell of this member alone. Once
	// the member has state on disk, the cell's own record of its members
	// (kept through every membership change) takes precedence.
	Peers []Peer
	// Join starts a member that was added to an existing cell (AddLearner)
	// instead of founding one: it starts empty and catches up from the
	// leader. Peers then lists (some of) the cell's current members, so it
	// can reach them.
	Join bool

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
	MaxTxnOps int
	// QuotaBytes bounds the keyspace (keys plus values). Past it, writes
	// that grow it fail with ErrQuotaExceeded; deletes still work.
	// Default 2 GiB. Each member keeps the live keyspace in memory (with
	// about 100 to 130 bytes per key on top), so this is also the bound
	// on its memory: set it to what each member, and each process
	// hosting several, can spare.
	QuotaBytes int64

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

	// TLS, when set, secures the default TCP transport. Set ClientCAs and
	// ClientAuth = tls.RequireAndVerifyClientCert, plus RootCAs and
	// Certificates, for mutual TLS between members.
	TLS *tls.Config
	// Logger receives the member's logs. nil = discard.
	Logger *slog.Logger
	// Disk is the in-memory disk used when DataDir is "". nil = a fresh
	// one. Tests keep it to restart a member on what it had synced.
	Disk *storage.MemDisk
}

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errs.InvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.Name == "" {
		return bad("Name is required")
	}
	seen := map[string]bool{}
	self := false
	for _, p := range c.Peers {
		if p.Name == "" {
			return bad("a peer has no name")
		}
		if seen[p.Name] {
			return bad("peer %q listed twice", p.Name)
		}
		seen[p.Name] = true
		self = self || p.Name == c.Name
	}
	if len(c.Peers) > 0 && !self && !c.Join {
		return bad("Peers must include this member (%q)", c.Name)
	}
	if c.Transport == nil && c.Addr == "" {
		for _, p := range c.Peers {
			if p.Name == c.Name {
				c.Addr = p.Addr
			}
		}
		if c.Addr == "" {
			return bad("Addr is required with the TCP transport")
		}
	}
	setDefault(&c.TickInterval, 100*time.Millisecond)
	setDefault(&c.ElectionTicks, 10)
	setDefault(&c.HeartbeatTicks, 1)
	setDefault(&c.MaxKeySize, 4<<10)
	setDefault(&c.MaxValueSize, 64<<10)
	setDefault(&c.MaxTxnOps, 128)
	setDefault(&c.QuotaBytes, 2<<30)
	setDefault(&c.CompactEvery, 10_000)
	setDefault(&c.CatchUpEntries, 5_000)
	setDefault(&c.HistoryRevisions, 100_000)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.TickInterval < 0 || c.ElectionTicks < 0 || c.HeartbeatTicks < 0:
		return bad("timings must be positive")
	case c.ElectionTicks <= c.HeartbeatTicks:
		return bad("ElectionTicks (%d) must exceed HeartbeatTicks (%d)", c.ElectionTicks, c.HeartbeatTicks)
	case c.MaxKeySize < 0 || c.MaxValueSize < 0 || c.MaxTxnOps < 0 || c.QuotaBytes < 0 || c.HistoryRevisions < 0:
		return bad("limits must be positive")
	case c.CatchUpEntries >= c.CompactEvery:
		return bad("CatchUpEntries (%d) must be less than CompactEvery (%d)", c.CatchUpEntries, c.CompactEvery)
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
