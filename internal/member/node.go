package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
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
	// probes counts queue waits; only the package's tests register in it.
	probes spi.Probes
	// clients serves processes that are not members (ServeClients);
	// clientLn is Config.ClientAddr's listener, nil without one.
	clients  *clientServer
	clientLn net.Listener
	// caughtUp is set once the member has applied the leader's commit
	// index as of a read index asked after Open (standing.go); bg holds
	// the goroutine that asks.
	caughtUp atomic.Bool
	bg       sync.WaitGroup
	// metricsOn is set once Config.Metrics holds this member's metrics
	// (before Open returns, so Close reads it without a lock).
	metricsOn bool
	// sessionStats counts this member's sessions' events for metrics.
	sessionStats spi.SessionStats

	// closing is cancelled when the node closes, ending its watches.
	closing     context.Context
	cancelClose context.CancelFunc

	closeOnce sync.Once
	closeErr  error
	// hurry is cancelled when a Shutdown's context ends: the close under
	// way stops waiting for the graceful steps and closes at once.
	hurry    context.Context
	hurryNow context.CancelFunc
}

// Open starts this process's member of the cell described by cfg and
// returns at once: it does not wait for the other members or for a
// leader (requests do, bounded by their contexts).
//
// A member with no state on disk founds the cell with cfg.Peers as its
// voters; one with state resumes from it. ctx bounds the opening itself.
//
// cfg has been validated, its defaults filled (the root's Config does it).
func Open(ctx context.Context, cfg Config) (*Node, error) {
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
				r.Fail(fmt.Errorf("%w: %w", errs.Internal, err))
			}
		},
	})
	if errors.Is(err, errs.StateLost) { // storage's lost state is the root's sentinel
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	ident, members, selfID, gs, err := prepareMember(ctx, store, &cfg)
	if err != nil {
		store.Close()
		return nil, err
	}
	n := &Node{cfg: cfg, store: store, sm: store.StateMachine(), tr: cfg.Transport, gossip: gs}
	n.closing, n.cancelClose = context.WithCancel(context.Background())
	n.hurry, n.hurryNow = context.WithCancel(context.Background())
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
			return nil, fmt.Errorf("%w: %w", errs.Listen, err)
		}
		n.tr, n.ownTr = tcp, true
	}
	n.hub = watch.NewHub(n.sm, 4096)
	// Closing ends every watch (client watches have no context of their
	// own for it, serve_watch.go).
	context.AfterFunc(n.closing, n.hub.Close)
	n.sessions = newSessionEngine(n)
	n.clients = newClientServer(n)
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
		MaxSizePerMsg:  MaxSizePerMsg,
		// A follower forwards one proposal per frame at most.
		MaxProposalBytes: cfg.MaxFrameSize - FrameOverhead,
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
		n.raft.Fail(fmt.Errorf("%w: %w", errs.Internal, err)) // reported before the node could hear it
	}
	n.sessions.start()
	n.startAutopilot()
	if err := n.openMetrics(); err != nil {
		n.Close()
		return nil, err
	}
	n.metricsOn = true
	if cfg.ClientAddr != "" {
		if err := n.listenClients(); err != nil {
			n.Close()
			return nil, err
		}
	}
	go func() {
		// A member that fails (storage error, internal panic) or is
		// removed ends its watches just as Close does.
		<-n.raft.Done()
		n.cancelClose()
	}()
	n.bg.Go(n.catchUp)
	return n, nil
}

// Close leaves the cell gracefully: when this member is the leader it
// first hands leadership to the most up-to-date follower (so the cell does
// not wait an election timeout), then stops and closes its storage.
// Pending requests end with errs.Closed. Close is idempotent. It is
// Shutdown(context.Background()): the hand-over is bounded by three
// election timeouts and a gossip leave by about a second, so Close always
// returns. A Config.Transport the caller supplied stays open: its owner
// closes it after Close (a transport Open made for Addr is closed here).
func (n *Node) Close() error {
	return n.Shutdown(context.Background())
}

// Shutdown is Close bounded by ctx, as http.Server.Shutdown is: it leaves
// the cell gracefully (gossip leave, clients and sessions ended,
// leadership handed over), but if ctx ends first it stops waiting for
// those steps, closes at once, and returns an error wrapping ctx's. The
// member is closed when Shutdown returns, either way; a hand-over cut
// short costs the cell an election timeout, as a crash would. Shutdown
// and Close may be called concurrently and repeatedly: every call returns
// once the member is closed, and a call whose ctx ends meanwhile hurries
// the close under way.
func (n *Node) Shutdown(ctx context.Context) error {
	if ctx.Err() != nil {
		n.hurryNow() // before the close starts, so nothing graceful is tried
	}
	stop := context.AfterFunc(ctx, n.hurryNow)
	n.closeOnce.Do(n.shutdown)
	if !stop() {
		// ctx ended before the close finished: it may have cut it short.
		return errors.Join(fmt.Errorf("coord: shutdown of %q not graceful: %w", n.cfg.Name, context.Cause(ctx)), n.closeErr)
	}
	return n.closeErr
}

// shutdown closes the member once; every wait in it ends when n.hurry
// does.
func (n *Node) shutdown() {
	n.cancelClose()
	if n.metricsOn {
		// Unregistered so that a member reopened in this process can
		// register again; only if registered, since a registry knows
		// collectors by their descriptors, and a failed registration
		// means another member's are there.
		n.closeMetrics()
	}
	if n.hurry.Err() == nil {
		// The leader's autopilot removes this member at once. It cannot
		// be cut short once begun (gossip bounds it at about a second).
		n.gossip.leave()
	}
	// Clients first: their requests use the sessions and Raft.
	n.clients.close()
	n.sessions.close()
	n.admin.close()
	n.stopRaft()
	n.bg.Wait()
	n.gossip.close()
	n.closeTransport()
	n.closeErr = n.store.Close()
	n.hurryNow() // releases the context
}

// stopRaft stops Raft, handing leadership over unless n.hurry ends first:
// then it stops at once (raftnode's Stop ends a hand-over under way).
func (n *Node) stopRaft() {
	if n.hurry.Err() != nil {
		n.raft.Stop(false)
		return
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n.raft.Stop(true)
	}()
	select {
	case <-stopped:
	case <-n.hurry.Done():
		n.raft.Stop(false)
		<-stopped
	}
}

func (n *Node) closeTransport() {
	if n.ownTr {
		n.tr.Close()
	}
}

// Err returns the error that stopped this member, or nil while it runs
// or after a clean Close: a storage or internal failure (errs.Internal),
// a lost data directory (errs.StateLost), or its removal from the cell
// (errs.Removed).
func (n *Node) Err() error { return n.raft.Err() }

// Done is closed when the member has stopped: by Close, by a failure, or
// because the cell removed it (see Err).
func (n *Node) Done() <-chan struct{} { return n.raft.Done() }

// Status describes a member at one instant.
type Status struct {
	Name      string // this member
	ID        uint64 // its Raft ID (derived from Name)
	Role      raftnode.Role
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
	Autopilot Decision
	// Clients is what the member's client door holds and has refused.
	Clients ClientStatus
}

// Status returns this member's current status. It never blocks on the
// network.
func (n *Node) Status() Status {
	rs := n.raft.Status()
	st := Status{
		Name: n.cfg.Name, ID: rs.ID, Role: rs.Role, Term: rs.Term,
		Commit: rs.Commit, Applied: rs.Applied, LastIndex: rs.LastIndex,
		Revision: n.sm.Revision(), LogSyncs: rs.LogSyncs, LogEntries: rs.LogEntries,
		Autopilot: n.Autopilot(),
		Clients:   n.clients.status(),
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
// the package's errors; a transaction that writes nothing is a read
// instead (proposeWithin).
func (n *Node) propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	return n.proposeWithin(ctx, cmd, n.maxReadBytes())
}

// proposeWithin is propose with maxRead the bound of a transaction's
// reads (Config.MaxReadBytes, or less for a client whose frames hold
// less). A transaction without writes never enters the log: it is served
// by read index from this member's state, as Get and List are. One that
// writes and reads a prefix carries the bound in its command
// (command.Txn.ReadLimit), so every member refuses it alike when it reads
// more; it is refused before it is proposed when the applied state
// already says so.
func (n *Node) proposeWithin(ctx context.Context, cmd *command.Command, maxRead int64) (command.Result, error) {
	if cmd.Kind == command.KindTxn && cmd.Txn != nil {
		if cmd.Txn.ReadOnly() {
			return n.readTxn(ctx, cmd.Txn, maxRead)
		}
		var err error
		if cmd, err = n.boundReads(cmd, maxRead); err != nil {
			return command.Result{}, err
		}
	}
	if cmd.Kind == command.KindSessionCreate && cmd.Session != nil {
		// Every session this build creates counts against the quota.
		cmd.Session.Charged = true
	}
	res, err := n.raft.Propose(ctx, cmd)
	countProposed(&n.sessionStats, cmd, res, err)
	if err != nil {
		return res, ambiguous(err)
	}
	return res, spi.ResultErr(cmd, res)
}

// readTxn serves a transaction without writes as a read: a read index
// (it is linearizable, as it was through the log), then the compares and
// gets against this member's applied state at one revision.
func (n *Node) readTxn(ctx context.Context, t *command.Txn, maxRead int64) (command.Result, error) {
	if err := n.readBarrier(ctx, spi.ReadOptions{}); err != nil {
		return command.Result{}, err
	}
	res, err := n.sm.ReadTxn(t, maxRead)
	switch {
	case errors.Is(err, errs.ReadTooLarge):
		return command.Result{}, fmt.Errorf("transaction: %w; read less in one transaction (page a List with Limit and After)", err)
	case errors.Is(err, errs.InvalidArgument):
		return command.Result{}, err
	case err != nil:
		return command.Result{}, n.stateErr(err)
	}
	return res, nil
}

// boundReads returns cmd, a transaction that writes, with its read limit
// set: maxRead when its gets could read more, none otherwise (whatever a
// client's command said), so a transaction of a few point gets stays in
// the format members before read limits apply. One whose reads the
// applied state already puts over the limit is refused here, never
// proposed.
func (n *Node) boundReads(cmd *command.Command, maxRead int64) (*command.Command, error) {
	limit := int64(0)
	if n.mayReadPast(cmd.Txn, maxRead) {
		limit = maxRead
	}
	if cmd.Txn.ReadLimit == limit && limit == 0 {
		return cmd, nil
	}
	t := *cmd.Txn
	t.ReadLimit = limit
	if err := n.sm.CheckTxnReads(&t); errors.Is(err, errs.ReadTooLarge) {
		return nil, fmt.Errorf("%w; nothing was proposed: read less in one transaction", err)
	} else if err != nil {
		return nil, n.stateErr(err)
	}
	c := *cmd
	c.Txn = &t
	return &c, nil
}

// mayReadPast reports whether the gets of a branch of t could read more
// than maxRead: a prefix get could, point gets only if so many large
// values could add up to it (each may find the key's value and the
// branch's own put of it, as the state machine counts).
func (n *Node) mayReadPast(t *command.Txn, maxRead int64) bool {
	if t.PrefixReads() || t.Nests() {
		// A nested transaction's gets are not counted below; it is
		// format 7 anyway, so the limit costs no older member anything.
		return true
	}
	for _, ops := range [][]command.Op{t.Then, t.Else} {
		var worst int64
		for _, op := range ops {
			if op.Type == command.OpGet {
				worst += 2*command.ReadCost(op.Key, nil) + 2*int64(n.cfg.MaxValueSize)
			}
		}
		if worst > maxRead {
			return true
		}
	}
	return false
}

// readBarrier makes a read linearizable unless the caller opted out. A
// closed member serves no reads, not even serializable ones.
func (n *Node) readBarrier(ctx context.Context, o spi.ReadOptions) error {
	if n.closing.Err() != nil {
		return n.closedErr()
	}
	if o.Serializable {
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

// closedErr is errs.Closed, with the failure that stopped the member if any.
func (n *Node) closedErr() error {
	if err := n.Err(); err != nil {
		return fmt.Errorf("%w: %w", errs.Closed, err)
	}
	return errs.Closed
}

// ambiguous maps raftnode's ambiguous error to the backends' (spi's).
func ambiguous(err error) error {
	var amb *raftnode.AmbiguousError
	if errors.As(err, &amb) {
		p := amb.Proposer
		p.Floor = 0 // the proposer's, not the write's
		return &spi.AmbiguousError{Proposer: p, Err: amb.Err}
	}
	return err
}
