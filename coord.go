package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/watch"
	"github.com/coordcell/coord/raftnode"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
)

// Node is one member of a cell, running inside this process. All its
// methods are safe for concurrent use by multiple goroutines.
type Node struct {
	cfg   Config
	store *storage.Store
	sm    *storage.StateMachine
	raft  *raftnode.Node
	hub   *watch.Hub
	// sessions keeps this member's sessions alive and, while it leads,
	// every session's deadline.
	sessions *sessionEngine
	// admin carries membership requests to the leader.
	admin *adminRPC
	tr    transport.Transport
	ownTr bool // we opened the transport, so we close it
	// gossip finds members and runs the autopilot; nil without
	// Config.Gossip.
	gossip *gossiper

	// closing is cancelled when the node closes, ending its watches.
	closing     context.Context
	cancelClose context.CancelFunc

	closeOnce sync.Once
	closeErr  error
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("member", cfg.Name)
	// A storage fault (corruption, a full disk) may be reported from
	// Pebble's own goroutines: it stops this member, never the process.
	var running atomic.Pointer[raftnode.Node]
	store, err := storage.Open(storage.Options{
		Dir:              cfg.DataDir,
		Disk:             cfg.Disk,
		Logger:           log,
		HistoryRevisions: cfg.HistoryRevisions,
		QuotaBytes:       cfg.QuotaBytes,
		OnFault: func(err error) {
			if r := running.Load(); r != nil {
				r.Fail(fmt.Errorf("%w: %w", ErrInternal, err))
			}
		},
	})
	if errors.Is(err, storage.ErrLostState) {
		return nil, fmt.Errorf("%w: %w", ErrStateLost, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	ident, members, selfID, gs, err := prepareMember(ctx, store, &cfg)
	if err != nil {
		store.Close()
		return nil, err
	}
	n := &Node{cfg: cfg, store: store, sm: store.StateMachine(), tr: cfg.Transport, gossip: gs}
	n.closing, n.cancelClose = context.WithCancel(context.Background())
	if n.tr == nil {
		addrs := map[string]string{}
		for _, m := range members {
			if m.Name != cfg.Name && m.Addr != "" {
				addrs[m.Name] = m.Addr
			}
		}
		tcp, err := transport.ListenTCP(transport.TCPConfig{
			Name: cfg.Name, Addr: cfg.Addr, Peers: addrs, TLS: cfg.TLS, Secret: cfg.Secret, Logger: log,
			MaxFrameSize: cfg.MaxFrameSize,
		})
		if err != nil {
			gs.close()
			store.Close()
			return nil, fmt.Errorf("%w: %w", ErrListen, err)
		}
		n.tr, n.ownTr = tcp, true
	}
	n.hub = watch.NewHub(n.sm, 4096)
	n.sessions = newSessionEngine(n)
	n.admin = newAdminRPC(n)
	n.raft, err = raftnode.Start(raftnode.Config{
		Name:           cfg.Name,
		ID:             selfID,
		Identity:       ident,
		Members:        members,
		Store:          store,
		Transport:      n.tr,
		Logger:         log,
		TickInterval:   cfg.TickInterval,
		ElectionTicks:  cfg.ElectionTicks,
		HeartbeatTicks: cfg.HeartbeatTicks,
		CompactEvery:   cfg.CompactEvery,
		CatchUpEntries: cfg.CatchUpEntries,
		MaxSizePerMsg:  maxSizePerMsg,
		// A follower forwards one proposal per frame at most.
		MaxProposalBytes: cfg.MaxFrameSize - frameOverhead,
		OnApply: func(out storage.ApplyOutput) {
			// Sessions first: a watcher that sees a session's keys go
			// must find the session ended too.
			n.sessions.onApply(out)
			n.hub.Publish(out.Changes)
		},
		OnSnapshot: func() { n.hub.Reset(n.sm.Revision()) },
		OnLeader:   n.sessions.onLeader,
		OnMessage:  n.onAppMessage,
	})
	if err != nil {
		gs.close()
		n.closeTransport()
		store.Close()
		return nil, err
	}
	running.Store(n.raft)
	if err := store.Fault(); err != nil {
		n.raft.Fail(fmt.Errorf("%w: %w", ErrInternal, err)) // reported before the node could hear it
	}
	n.sessions.start()
	n.startAutopilot()
	go func() {
		// A member that fails (storage error, internal panic) ends its
		// watches just as Close does.
		<-n.raft.Done()
		n.cancelClose()
	}()
	return n, nil
}

// Close leaves the cell gracefully: when this member is the leader it
// first hands leadership to the most up-to-date follower (so the cell does
// not wait an election timeout), then stops and closes its storage.
// Pending requests end with ErrClosed. Close is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.cancelClose()
		n.gossip.leave() // the leader's autopilot removes this member at once
		n.sessions.close()
		n.admin.close()
		n.raft.Stop(true)
		n.gossip.close()
		n.closeTransport()
		n.closeErr = n.store.Close()
	})
	return n.closeErr
}

func (n *Node) closeTransport() {
	if n.ownTr {
		n.tr.Close()
	}
}

// Err returns the error that stopped this member (a storage or internal
// failure), or nil while it runs or after a clean Close.
func (n *Node) Err() error { return n.raft.Err() }

// Done is closed when the member has stopped, by Close or by failure.
func (n *Node) Done() <-chan struct{} { return n.raft.Done() }

// Role is a member's role in the Raft group. It is raftnode's type, so
// the two layers share one vocabulary.
type Role = raftnode.Role

// The roles a member can have.
const (
	RoleFollower     = raftnode.RoleFollower
	RoleCandidate    = raftnode.RoleCandidate
	RolePreCandidate = raftnode.RolePreCandidate
	RoleLeader       = raftnode.RoleLeader
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
}

// Status returns this member's current status. It never blocks on the
// network.
func (n *Node) Status() Status {
	rs := n.raft.Status()
	st := Status{
		Name: n.cfg.Name, ID: rs.ID, Role: rs.Role, Term: rs.Term,
		Commit: rs.Commit, Applied: rs.Applied, LastIndex: rs.LastIndex,
		Revision: n.sm.Revision(), LogSyncs: rs.LogSyncs, LogEntries: rs.LogEntries,
	}
	if rs.Leader != 0 {
		st.Leader, _ = n.raft.MemberName(rs.Leader)
	}
	// Status is polled often (coordtest waits on it every few ms): it reads
	// only memory, the applied membership and raftnode's address book,
	// never storage.
	cs := n.sm.ConfState()
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners()} {
		for _, id := range ids {
			name, ok := n.raft.MemberName(id)
			if !ok {
				name = fmt.Sprintf("%016x", id) // as Members names an unknown ID
			}
			st.Members = append(st.Members, name)
		}
	}
	slices.Sort(st.Members)
	return st
}

// propose runs cmd through Raft and maps the state machine's status to
// the package's errors.
func (n *Node) propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	res, err := n.raft.Propose(ctx, cmd)
	if err != nil {
		return res, err
	}
	switch res.Status {
	case command.StatusOK:
		return res, nil
	case command.StatusQuotaExceeded:
		return res, ErrQuotaExceeded
	case command.StatusNoSession:
		return res, ErrSessionExpired
	default:
		return res, fmt.Errorf("%w: the cell refused the command (status %d)", errs.Internal, res.Status)
	}
}

// readBarrier makes a read linearizable unless the caller opted out. A
// closed member serves no reads, not even serializable ones.
func (n *Node) readBarrier(ctx context.Context, o readOptions) error {
	if n.closing.Err() != nil {
		return n.closedErr()
	}
	if o.serializable {
		return nil
	}
	return n.raft.ReadBarrier(ctx)
}

// stateErr maps an error from reading the local state: a store closed
// under the read means the member closed.
func (n *Node) stateErr(err error) error {
	if errors.Is(err, storage.ErrClosed) || n.closing.Err() != nil {
		return n.closedErr()
	}
	return fmt.Errorf("%w: %w", errs.Internal, err)
}

// closedErr is ErrClosed, with the failure that stopped the member if any.
func (n *Node) closedErr() error {
	if err := n.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return ErrClosed
}

// Get returns the key. It fails with ErrNotFound if the key does not
// exist. By default the read is linearizable (it reflects every write
// completed before the call, on any member); Serializable() reads this
// member's state without asking the leader.
func (n *Node) Get(ctx context.Context, key string, opts ...ReadOption) (KV, error) {
	if err := n.checkKey(key); err != nil {
		return KV{}, err
	}
	o := readOpts(opts)
	if err := n.readBarrier(ctx, o); err != nil {
		return KV{}, err
	}
	kv, ok, err := n.sm.Get(key)
	if err != nil {
		return KV{}, n.stateErr(err)
	}
	if !ok {
		return KV{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return fromCmdKV(kv), nil
}

// List returns every key under prefix, in key order, and the revision
// of the state it read: Watch(ctx, prefix, FromRev(rev)) then continues
// exactly after it. Reads are linearizable unless Serializable() is given.
func (n *Node) List(ctx context.Context, prefix string, opts ...ReadOption) ([]KV, int64, error) {
	if len(prefix) > n.cfg.MaxKeySize {
		return nil, 0, fmt.Errorf("%w: prefix of %d bytes, limit %d", ErrKeyTooLarge, len(prefix), n.cfg.MaxKeySize)
	}
	o := readOpts(opts)
	if err := n.readBarrier(ctx, o); err != nil {
		return nil, 0, err
	}
	kvs, rev, err := n.sm.List(prefix)
	if err != nil {
		return nil, 0, n.stateErr(err)
	}
	out := make([]KV, len(kvs))
	for i, kv := range kvs {
		out[i] = fromCmdKV(kv)
	}
	return out, rev, nil
}

// Put writes value under key and returns the key as written. With
// IfVersion(v) it is a compare-and-set (v = 0: create only) that fails
// with ErrConflict, changing nothing, when the key's version is not v.
// With Ephemeral(s) the key belongs to session s and is deleted when the
// session ends.
//
// An error wrapping ErrAmbiguous means the write may or may not have
// happened; ErrNoQuorum means it did not.
func (n *Node) Put(ctx context.Context, key string, value []byte, opts ...WriteOption) (KV, error) {
	if err := n.checkKey(key); err != nil {
		return KV{}, err
	}
	if len(value) > n.cfg.MaxValueSize {
		return KV{}, fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(value), n.cfg.MaxValueSize)
	}
	o := writeOpts(opts)
	txn := &command.Txn{Then: []command.Op{{Type: command.OpPut, Key: key, Value: value, Session: o.session}}}
	if o.ifVersion != nil {
		txn.If = []command.Compare{{Key: key, Target: command.TargetVersion, Op: command.Equal, Int: *o.ifVersion}}
	}
	res, err := n.propose(ctx, &command.Command{Kind: command.KindTxn, Txn: txn})
	if err != nil {
		return KV{}, err
	}
	if !res.Succeeded {
		return KV{}, fmt.Errorf("%w: %q is not at version %d", ErrConflict, key, *o.ifVersion)
	}
	return fromCmdKV(res.Ops[0].KVs[0]), nil
}

// Delete deletes key and returns the cell revision after the delete.
// Deleting an absent key is not an error (the revision does not move).
// With IfVersion(v) it deletes only at that version, else ErrConflict.
func (n *Node) Delete(ctx context.Context, key string, opts ...WriteOption) (int64, error) {
	if err := n.checkKey(key); err != nil {
		return 0, err
	}
	o := writeOpts(opts)
	txn := &command.Txn{Then: []command.Op{{Type: command.OpDelete, Key: key}}}
	if o.ifVersion != nil {
		txn.If = []command.Compare{{Key: key, Target: command.TargetVersion, Op: command.Equal, Int: *o.ifVersion}}
	}
	res, err := n.propose(ctx, &command.Command{Kind: command.KindTxn, Txn: txn})
	if err != nil {
		return 0, err
	}
	if !res.Succeeded {
		return 0, fmt.Errorf("%w: %q is not at version %d", ErrConflict, key, *o.ifVersion)
	}
	return res.Rev, nil
}

func (n *Node) checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > n.cfg.MaxKeySize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), n.cfg.MaxKeySize)
	}
	return nil
}
