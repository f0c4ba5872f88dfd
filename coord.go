package coord

import (
	"context"
	"net/http"

	"github.com/coordcell/coord/internal/member"
)

// Node is one member of a cell, running inside this process: the Cell
// methods, its lifecycle (Close, Shutdown, Done, Err, Ready, Status) and
// what DESIGN.md gives it (Handler, Backup). Operations (membership, the
// autopilot, the client door, metrics, the gossip keyring) are on its
// Admin handle. All its methods are safe for concurrent use by multiple
// goroutines.
type Node struct {
	// cellOps is the Cell API, over this member as its backend.
	*cellOps
	m *member.Node
}

// Open starts this process's member of the cell described by cfg and
// returns at once: it does not wait for the other members or for a
// leader (requests do, bounded by their contexts).
//
// A member with no state on disk founds the cell with cfg.Peers as its
// voters; one with state resumes from it. ctx bounds the opening itself.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := member.Open(ctx, memberConfig(cfg))
	if err != nil {
		return nil, err
	}
	n := &Node{m: m}
	n.cellOps = &cellOps{b: m.Backend(), self: n, node: n}
	return n, nil
}

// Close leaves the cell gracefully: when this member is the leader it
// first hands leadership to the most up-to-date follower (so the cell does
// not wait an election timeout), then stops and closes its storage.
// Pending requests end with ErrClosed. Close is idempotent. It is
// Shutdown(context.Background()): the hand-over is bounded by three
// election timeouts and a gossip leave by about a second, so Close always
// returns. A Config.Transport the caller supplied stays open: its owner
// closes it after Close (a transport Open made for Addr is closed here).
func (n *Node) Close() error { return n.m.Close() }

// Shutdown is Close bounded by ctx, as http.Server.Shutdown is: it leaves
// the cell gracefully (gossip leave, clients and sessions ended,
// leadership handed over), but if ctx ends first it stops waiting for
// those steps, closes at once, and returns an error wrapping ctx's. The
// member is closed when Shutdown returns, either way; a hand-over cut
// short costs the cell an election timeout, as a crash would. Shutdown
// and Close may be called concurrently and repeatedly: every call returns
// once the member is closed, and a call whose ctx ends meanwhile hurries
// the close under way.
func (n *Node) Shutdown(ctx context.Context) error { return n.m.Shutdown(ctx) }

// Err returns the error that stopped this member, or nil while it runs
// or after a clean Close: a storage or internal failure (ErrInternal),
// a lost data directory (ErrStateLost), or its removal from the cell
// (ErrRemoved).
func (n *Node) Err() error { return n.m.Err() }

// Done is closed when the member has stopped: by Close, by a failure, or
// because the cell removed it (see Err).
func (n *Node) Done() <-chan struct{} { return n.m.Done() }

// Ready waits until the member is ready to serve, the condition /readyz
// reports: it knows a leader, has caught up (applied the commit index
// the leader had when this member first asked it, by a read index, after
// Open: so a member that joined, or restarted behind, is not ready while
// it replays the log or installs a snapshot), has applied every entry it
// knows committed, and is in contact with the leader (heard it within
// two election timeouts). A member that stopped is never ready: Ready
// then returns ErrClosed, or the error that stopped it (ErrRemoved for a
// removed member). When ctx ends first it returns ErrNotReady wrapping
// ctx's error, with the unmet condition.
func (n *Node) Ready(ctx context.Context) error { return n.m.Ready(ctx) }

// Role is a member's role in the Raft group.
type Role string

// The roles a member can have.
const (
	RoleFollower     Role = "follower"
	RoleCandidate    Role = "candidate"
	RolePreCandidate Role = "pre-candidate"
	RoleLeader       Role = "leader"
)

// Status describes a member at one instant.
type Status struct {
	Name      string // this member
	ID        uint64 // its Raft ID (derived from Name)
	Role      Role
	Leader    string // the leader's name, "" when none is known
	Term      uint64 // the Raft term
	Commit    uint64 // the highest log index known committed
	Applied   uint64 // the highest log index applied here
	LastIndex uint64 // the last index of this member's log
	Revision  int64  // the cell revision of this member's applied state
	Members   []string
	// LogSyncs counts the fsyncs of this member's Raft log since Open, and
	// LogEntries the entries they made durable; LogEntries/LogSyncs is the
	// group-commit factor.
	LogSyncs   uint64
	LogEntries uint64
	// Autopilot is the autopilot's last decision on this member (when it
	// led) and why; the zero value without gossip.
	Autopilot AutopilotDecision
	// Clients is what the member's client door holds and has refused.
	Clients ClientStatus
}

// Status returns this member's current status. It never blocks on the
// network.
func (n *Node) Status() Status {
	s := n.m.Status()
	return Status{Name: s.Name, ID: s.ID, Role: Role(s.Role), Leader: s.Leader, Term: s.Term,
		Commit: s.Commit, Applied: s.Applied, LastIndex: s.LastIndex, Revision: s.Revision, Members: s.Members,
		LogSyncs: s.LogSyncs, LogEntries: s.LogEntries, Autopilot: AutopilotDecision(s.Autopilot),
		Clients: ClientStatus(s.Clients)}
}

// Handler returns the member's operational HTTP handler, for the host to
// mount where it likes (it serves no port of its own):
//
//	/healthz   200 while the member runs, 503 once it has stopped
//	/readyz    200 when the member knows a leader, has caught up and
//	           applied up to its commit index, and is in contact with the
//	           leader, else 503 with the reason (see Ready)
//	/status    the member and cell status as JSON (StatusReport)
//	/metrics   Prometheus metrics, with WithMetricsGatherer
//	/          a read-only HTML page: members, locks, elections, sessions
//	/admin/... the operator's API used by coordctl, with WithAdmin
//
// Paths are relative to where the handler is mounted: mount it with
// http.StripPrefix under a prefix. Every page but /admin/ reads only this
// member's applied state and never writes.
func (n *Node) Handler(opts ...HandlerOption) http.Handler {
	var o member.HandlerOptions
	for _, f := range opts {
		f(&o)
	}
	return n.m.Handler(o)
}
