package coord

import (
	"context"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordcell/coord/internal/member"
)

// Admin is a member's operations handle: membership, the autopilot's
// decisions, the client door, metrics and the gossip keyring. What a
// program does with the cell's data is on Node; what an operator does to
// the cell is here. Its methods are safe for concurrent use.
type Admin struct{ m *member.Node }

// Admin returns n's operations handle.
func (n *Node) Admin() *Admin { return &Admin{m: n.m} }

// Members returns the cell's members as of a linearizable read.
func (a *Admin) Members(ctx context.Context) ([]Member, error) {
	ms, err := a.m.Members(ctx)
	out := make([]Member, len(ms))
	for i, m := range ms {
		out[i] = Member(m)
	}
	return out, err
}

// AddLearner adds a non-voting member: it replicates the log (from a
// snapshot first, if the log it needs was compacted), serves reads and
// watches, and does not slow commits. Start the new member with
// Config.Join. Promote makes it a voter once it has caught up.
func (a *Admin) AddLearner(ctx context.Context, name, addr string) error {
	return a.m.AddLearner(ctx, name, addr)
}

// Promote makes a learner a voter. It is refused with ErrNotCaughtUp until
// the learner's log is within a few entries of the leader's (a voter far
// behind would stall commits). It can be called on any member: a follower
// asks the leader.
func (a *Admin) Promote(ctx context.Context, name string) error { return a.m.Promote(ctx, name) }

// MoveLeader hands the cell's leadership to the voter name (etcd's
// MoveLeader), from any member: the leader starts the hand-over (asked
// by a follower through the cell) and it returns once this member sees
// name lead. Writes in flight are sent on to the new leader, as after
// any change of leader. ErrUnknownMember for no such member, ErrInvalidArgument
// for a learner, ErrNoQuorum when the hand-over did not complete within
// two election timeouts (the target cut off or far behind; the old
// leader carries on). Moving it to the leader itself is a no-op.
func (a *Admin) MoveLeader(ctx context.Context, name string) error { return a.m.MoveLeader(ctx, name) }

// UpdateMember moves member name (voter or learner) to the transport
// address addr in the replicated membership (etcd's MemberUpdate): each
// member's transport dials it at addr once the change applies there, and
// a member restarted from its data directory reads addr from it. It
// returns once the change applied on this member. It does not move the
// member's own listener: restart that member with Config.Addr = addr,
// and its own entry in Config.Peers if it has one (before or after the
// change; until both are done the others cannot reach it, as a member
// cut off). The others' Config.Peers, read only to found the cell, need
// not change: a member restarted from its data directory reads the
// addresses from it. An address the transport cannot use
// (over TCP, host:port) is ErrInvalidConfig, no such member
// ErrUnknownMember, another member's address ErrMemberExists; each
// changes nothing.
//
// Every member must run a version that has UpdateMember: an older one
// applies the change without moving the address and keeps dialling the
// old one. Once it is upgraded, UpdateMember with the same address
// writes the change again, and it moves.
func (a *Admin) UpdateMember(ctx context.Context, name, addr string) error {
	return a.m.UpdateMember(ctx, name, addr)
}

// RemoveMember removes a member (voter or learner) from the cell. Its name
// cannot be used again. Removing the leader makes it step down first.
func (a *Admin) RemoveMember(ctx context.Context, name string) error {
	return a.m.RemoveMember(ctx, name)
}

// Autopilot returns the autopilot's last decision on this member (when
// it led) and why; the zero value without gossip.
func (a *Admin) Autopilot() AutopilotDecision { return AutopilotDecision(a.m.Autopilot()) }

// Addr returns the address this member's transport listens on. With the
// default TCP transport (or any Config.Transport that reports its
// address through an Addr() string method) it is the address actually
// bound, so a member opened with Config.Addr "127.0.0.1:0" tells here
// which port it got, to hand to the members that will join it. With a
// transport that does not report one (coordtest's in-memory network) it
// is Config.Addr as given or, when that is empty, this member's address
// in Config.Peers: the one the others use. It is "" if neither names it.
func (a *Admin) Addr() string { return a.m.Addr() }

// ServeClients serves processes that are not members (Connect) on l,
// which the host supplies: a plain listener, or a tls.Listener whose
// config requires and verifies client certificates (mutual TLS). Under
// TLS a client's identity is its certificate's name (the first DNS SAN,
// else the first URI SAN, else the common name), for a certificate the
// listener's config verified or one of a CA the member trusts for
// clients, or the name its credential proves (IssueClientCredential,
// which only a config without chain verification lets through:
// Config.ClientAddr's does); anything else is refused. On a plain
// listener it is the name the client gives, unauthenticated (one WARN is
// logged), so use plaintext only where the network itself admits only
// trusted clients. A client is never a member: it reaches no Raft message,
// membership change or session it did not create, and writes only where
// Config.ClientPolicy grants.
//
// It blocks until l fails (its error is returned) or the member closes
// (then ErrClosed); Close closes l and every client connection served.
func (a *Admin) ServeClients(l net.Listener) error { return a.m.ServeClients(l) }

// ClientAddr returns the address the member serves clients on
// (Config.ClientAddr, with the port bound), or "" without one.
func (a *Admin) ClientAddr() string { return a.m.ClientAddr() }

// SetClientRevoked replaces Config.ClientRevoked while the member runs:
// from now on a credential of name N and generation G is refused when G
// <= revoked[N], and the connections such credentials were admitted with
// are ended at once. Other clients are not touched. Set it on every
// member (each holds its own copy, as of its configuration); the map is
// copied.
func (a *Admin) SetClientRevoked(revoked map[string]uint64) { a.m.SetClientRevoked(revoked) }

// RegisterMetrics registers the member's metrics, named coord_*, with
// reg. They are read from the member's state when reg is scraped, so
// they cost nothing between scrapes and add no work on the write path.
// Event counters and histograms are atomics kept by the packages that
// see the events, read here at scrape time too. No label is per key,
// session or lock: the only labels are bounded sets (member roles and
// health, and peer: the names of the cell's members). A process that
// embeds several members registers each through
// prometheus.WrapRegistererWith with a member label.
//
// Serve them with Handler(WithMetricsGatherer(registry)).
func (a *Admin) RegisterMetrics(reg prometheus.Registerer) error { return a.m.RegisterMetrics(reg) }

// GossipKeyring returns the member's gossip keyring, to rotate keys on
// every member: AddKey(new), then UseKey(new), then RemoveKey(old). It
// fails on a member that does not gossip.
func (a *Admin) GossipKeyring() (*GossipKeyring, error) {
	k, err := a.m.GossipKeyring()
	if err != nil {
		return nil, err
	}
	return &GossipKeyring{k: k}, nil
}

// GossipKeyring holds the keys that encrypt gossip (Config.Gossip.Keys):
// the primary key encrypts, every key decrypts. Its methods are safe for
// concurrent use.
type GossipKeyring struct{ k *memberlist.Keyring }

// AddKey adds key (16, 24 or 32 bytes) for decryption; it does not
// encrypt until UseKey.
func (k *GossipKeyring) AddKey(key []byte) error { return k.k.AddKey(key) }

// UseKey makes key, already added, the one that encrypts.
func (k *GossipKeyring) UseKey(key []byte) error { return k.k.UseKey(key) }

// RemoveKey drops key; the primary key cannot be removed.
func (k *GossipKeyring) RemoveKey(key []byte) error { return k.k.RemoveKey(key) }

// Keys returns every key, the primary first.
func (k *GossipKeyring) Keys() [][]byte { return k.k.GetKeys() }

// PrimaryKey returns the key that encrypts.
func (k *GossipKeyring) PrimaryKey() []byte { return k.k.GetPrimaryKey() }

// GetKeys is Keys, by the name memberlist's keyring gives it, which
// GossipKeyring used to return.
//
// Deprecated: use Keys.
func (k *GossipKeyring) GetKeys() [][]byte { return k.Keys() }

// GetPrimaryKey is PrimaryKey, by the name memberlist's keyring gives it.
//
// Deprecated: use PrimaryKey.
func (k *GossipKeyring) GetPrimaryKey() []byte { return k.PrimaryKey() }

// Member is one member of the cell.
type Member struct {
	Name string
	Addr string
	// ClientAddr is the address the member serves clients on, as it
	// announced it to the cell (replicated in the address book); empty
	// while it serves none or has not announced one yet.
	ClientAddr string
	ID         uint64 // its Raft ID: from Name, and with gossip from Name and its data directory's incarnation
	// Learner members replicate the log and serve reads and watches but
	// do not vote or count for commits.
	Learner bool
	// Zone is the member's failure domain, as it gossips it.
	Zone string
	// Role is MemberVoter, MemberLearner or MemberStandby (a learner that
	// may vote, kept in reserve by the autopilot).
	Role string
	// Health is how gossip sees the member: GossipAlive, GossipSuspect,
	// GossipFailed, GossipLeft, or GossipUnknown (not gossiping, or no
	// gossip here).
	Health string
}

// AutopilotDecision is the autopilot's last decision and why.
type AutopilotDecision struct {
	Action string // none, add-learner, promote, demote, remove
	Member string
	Reason string
	At     time.Time
	Err    string // the change failed, when set
}

// A member's health as gossip sees it (Member.Health).
const (
	GossipAlive = "alive"
	// GossipSuspect: this member's probe of it went unanswered; gossip
	// calls it failed unless it answers within the suspicion time.
	GossipSuspect = "suspect"
	GossipFailed  = "failed"
	GossipLeft    = "left"
	GossipUnknown = "unknown"
)

// Member roles, as Members reports them.
const (
	MemberVoter   = "voter"
	MemberLearner = "learner" // catching up, or never to vote
	MemberStandby = "standby" // caught up and may vote, not needed as a voter now
)

// ClientStatus is what a member's client door holds now and what it has
// refused or cut off since Open (Status.Clients).
type ClientStatus struct {
	// Admitted counts the client connections served now, Pending those
	// still in their handshake.
	Admitted, Pending int
	// Refused counts the connections that ended before being admitted:
	// dropped by the bounds on handshakes in progress, past
	// Config.ClientHandshakeTimeout, failing TLS, or refused (the member
	// is busy or closing, the policy or the per-identity bound said no).
	Refused uint64
	// CutSlow counts the clients cut off for not reading (their queue
	// past its bound, or a write past its deadline); CutIdle those
	// closed for sending nothing, or for a frame left unfinished.
	CutSlow, CutIdle uint64
	// QueuedBytes is the bytes queued unwritten for clients now;
	// QueuedPeak the most ever at once.
	QueuedBytes, QueuedPeak int64
}

// Backup writes an online, consistent backup of the cell's keys to w:
// every key, with its version and revisions, as of one revision that is
// at least as new as any write acknowledged before the call (it follows
// a linearizable read). Writes may go on meanwhile. The backup carries
// its format version and a checksum; Restore seeds a new cell from it.
//
// Ephemeral keys are included (as they were), and Restore drops them;
// the change history is not (a restored cell's watches start at the
// backup's revision).
func (n *Node) Backup(ctx context.Context, w io.Writer) error { return n.m.Backup(ctx, w) }

// BackupInfo describes a backup that Restore read.
type BackupInfo struct {
	Cell     uint64    // the ID of the cell it was taken from
	Member   string    // the member that took it
	Revision int64     // its revision
	Keys     int       // the keys it holds, ephemeral ones included
	Taken    time.Time // when, by the clock of the member that took it
	Checksum string    // its SHA-256, in hex
}

// ReadBackup reads and checks a whole backup from r. It returns
// ErrBadBackup for a truncated or corrupt one, ErrBackupVersion for one of
// an unknown format.
func ReadBackup(r io.Reader) (BackupInfo, []KV, error) {
	info, kvs, err := member.ReadBackup(r)
	if err != nil {
		return BackupInfo(info), nil, err
	}
	return BackupInfo(info), fromCmdKVs(kvs), nil
}

// RestoreOptions describe the member a data directory is restored for.
type RestoreOptions struct {
	// Name is the member the directory is for (its Config.Name).
	// Required.
	Name string
	// Peers are the new cell's founding voters, the same list on every
	// member restored; it must include Name. Empty = a cell of Name
	// alone (with Addr).
	Peers []Peer
	// Addr is Name's address when Peers is empty.
	Addr string
	// CellName distinguishes cells restored from the same backup onto
	// the same peers (see Config.CellName).
	CellName string
	// Logger receives what Restore did. nil = discard.
	Logger *slog.Logger
}

// Restore seeds dir, offline, as the data directory of member
// opts.Name of a new cell whose keys are the backup's, in the manner of
// "etcdutl snapshot restore". Run it for every founding member with the
// same backup and options but Name, then Open each member on its dir
// (Config.Peers is then read from the directory, not the Config).
//
// The new cell keeps every key's version and revisions and the backup's
// revision, so fencing tokens it grants exceed every earlier one; it has
// a new cell ID (members of the old cell cannot talk to it), no
// sessions, and no ephemeral keys, since their holders are gone.
//
// dir must not exist or be empty. A backup that is truncated, corrupt or
// of an unknown format is refused (ErrBadBackup, ErrBackupVersion)
// before anything is written; Restore builds the directory beside dir and
// renames it into place last, so dir is never left half restored.
func Restore(dir string, r io.Reader, opts RestoreOptions) error {
	var peers []member.Peer
	if opts.Peers != nil {
		peers = memberPeers(opts.Peers)
	}
	return member.Restore(dir, r, member.RestoreOptions{Name: opts.Name, Peers: peers, Addr: opts.Addr,
		CellName: opts.CellName, Logger: opts.Logger})
}

// HandlerOption changes what Handler serves.
type HandlerOption func(*handlerOptions)

type handlerOptions = member.HandlerOptions

// WithMetricsGatherer serves g's metrics at /metrics, in the Prometheus
// text format. Give the registry that RegisterMetrics registered into.
// Without it the handler has no /metrics.
func WithMetricsGatherer(g prometheus.Gatherer) HandlerOption {
	return func(o *handlerOptions) { o.Gatherer = g }
}

// WithAdmin turns on the /admin/ endpoints that coordctl uses: reads,
// writes, membership changes and backups. They are off by default since
// whoever reaches them controls the cell. A non-empty token must then be
// sent by every admin request as "Authorization: Bearer <token>"; the
// host serves the handler over TLS so that the token stays secret. An
// empty token leaves authentication to the host (mutual TLS, a
// loopback-only listener).
func WithAdmin(token string) HandlerOption {
	return func(o *handlerOptions) { o.Admin, o.Token = true, token }
}

// The admin API's documents (Handler with WithAdmin, and /status): the
// JSON a member serves, which coordctl and an operator's own tools
// decode into these.

// StatusReport is what /status serves: this member's view of itself and
// of the cell.
type StatusReport struct {
	Member    string         `json:"member"`
	Role      Role           `json:"role"`
	Term      uint64         `json:"term"`
	Leader    string         `json:"leader"`
	Commit    uint64         `json:"commit_index"`
	Applied   uint64         `json:"applied_index"`
	LastIndex uint64         `json:"last_index"`
	Revision  int64          `json:"revision"`
	Ready     bool           `json:"ready"`
	NotReady  string         `json:"not_ready,omitempty"`
	Members   []MemberHealth `json:"members"`
	Sessions  int            `json:"sessions"`
	// Autopilot is the autopilot's last decision on this member and why;
	// null when the cell runs no autopilot (no gossip).
	Autopilot *AutopilotDecision `json:"autopilot"`
}

// Member health as the leader sees it.
const (
	HealthHealthy     = "healthy"     // answered the leader within an election timeout
	HealthUnreachable = "unreachable" // did not
	HealthUnknown     = "unknown"     // this member does not lead, so cannot tell
)

// MemberHealth is one member as /status shows it.
type MemberHealth struct {
	Name    string `json:"name"`
	Addr    string `json:"addr"`
	ID      uint64 `json:"id"`
	Role    string `json:"role"` // "voter" or "learner"
	Leader  bool   `json:"leader"`
	Health  string `json:"health"`
	Match   uint64 `json:"match_index,omitempty"` // known only to the leader
	Current bool   `json:"this_member"`
}

// LockReport is one lock as the cell holds it: its queue of waiters in
// grant order. For a Mutex or a Lease the first entry holds the lock;
// for an RWMutex or a Semaphore several may. While LockDelay is set, no
// entry holds it: every entry waits for the delay to end.
type LockReport struct {
	Name string `json:"name"`
	// Held is whether the first entry of Queue (or, for an RWMutex or a
	// Semaphore, the first few) holds the lock: false while the queue is
	// empty or the lock is in lock-delay.
	Held  bool          `json:"held"`
	Queue []QueueReport `json:"queue"`
	// LockDelay is the lock's lock-delay marker, when it has one: its
	// holder's session expired (WithLockDelay) and the cell grants the
	// lock to nobody until the marker is removed after the delay.
	LockDelay *LockDelayReport `json:"lock_delay,omitempty"`
}

// LockDelayReport is a lock-delay marker: a key the cell wrote under the
// lock's queue, with no session, when the holder's session expired.
type LockDelayReport struct {
	Key string `json:"key"`
	// Delay is how long after the expiry the lock stays ungranted.
	Delay time.Duration `json:"delay"`
	// Revision is the expiry's, at which the marker was written: the
	// delay runs from the time the leader applied it.
	Revision int64 `json:"revision"`
}

// QueueReport is one waiter (or holder) of a lock or an election.
type QueueReport struct {
	Key       string    `json:"key"`
	Session   SessionID `json:"session"`
	Token     Token     `json:"token"` // the fencing token it holds, or will
	Value     string    `json:"value,omitempty"`
	CreateRev int64     `json:"create_revision"`
}

// ElectionReport is one election group: its leader (the first
// candidate) and the candidates queued behind it.
type ElectionReport struct {
	Group      string        `json:"group"`
	Candidates []QueueReport `json:"candidates"`
}

// SessionReport is one live session as the cell records it.
type SessionReport struct {
	ID  SessionID     `json:"id"`
	TTL time.Duration `json:"ttl"`
	// Unheard is how long leaders have held office without hearing from
	// the session since one last did; it expires once this passes TTL.
	Unheard time.Duration `json:"unheard"`
	// Keys counts the ephemeral keys it owns (lock waits, candidacies).
	Keys int `json:"keys"`
}

// ListReport is the admin API's answer to a list.
type ListReport struct {
	KVs      []KV  `json:"kvs"`
	Revision int64 `json:"revision"`
}

// MemberRequest is the body of the admin API's membership changes.
type MemberRequest struct {
	Name string `json:"name"`
	Addr string `json:"addr,omitempty"` // for add-learner
}

// TxnRequest is a transaction as the admin API takes it (coordctl txn
// reads one from a JSON file): every comparison of If holds, or Then runs
// instead of Else.
//
//	{"if":   [{"key": "cfg", "target": "version", "op": "=", "int": 3}],
//	 "then": [{"op": "put", "key": "cfg", "value": "v4"}],
//	 "else": [{"op": "get", "key": "cfg"}]}
type TxnRequest struct {
	If   []TxnCompare `json:"if"`
	Then []TxnOp      `json:"then"`
	Else []TxnOp      `json:"else"`
}

// TxnCompare is one comparison: Target is "version", "create_rev",
// "mod_rev" (compared with Int) or "value" (compared with Value); Op is
// "=", "!=", "<" or ">".
type TxnCompare struct {
	Key    string `json:"key"`
	Target string `json:"target"`
	Op     string `json:"op"`
	Int    int64  `json:"int,omitempty"`
	Value  string `json:"value,omitempty"`
}

// TxnOp is one operation: Op is "put" (Key, Value), "get", "delete",
// "get_prefix" or "delete_prefix" (Key is then the prefix).
type TxnOp struct {
	Op    string `json:"op"`
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}
