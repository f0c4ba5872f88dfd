// Package raftnode hosts one member's raft.RawNode: the Ready loop, group
// commit, proposals and their waiters (each command applied once however
// often it is resent, resend.go), batched read-index, snapshot streaming,
// log compaction and leadership hand-over on close.
//
// It is split in two. The consensus core (core.go) holds the RawNode and
// all the bookkeeping around it, with no goroutine, no I/O of its own and
// ticks for a clock: it is driven by its caller and says in each Ready
// what to persist, send, apply and answer, so a test drives several
// cores tick by tick (core_test.go, testdata). The Node drives it with
// the real clock, transport and store.
//
// Three goroutines do the driving. The raft loop owns the core: it
// ticks, steps incoming messages, hands queued proposals over once per
// wake-up, and carries out each Ready: a leader's messages out, the
// Ready's log entries and hard state written with one fsync
// (persist.go), a follower's messages out (they promise durability),
// committed entries handed on. The apply loop applies committed entries
// to the state machine in order and wakes the callers waiting on them;
// small batches the raft loop applies itself while the apply loop is
// idle (inline applies, apply.go), so OnApply runs on either, never both
// at once. A receiver goroutine stages incoming snapshot chunks so
// Pebble writes never stall the raft loop.
package raftnode

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"iter"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
	"go.etcd.io/raft/v3"
)

// IDFromName derives a member's Raft ID from its stable name, so every
// member computes the same founding configuration from the same peer list.
func IDFromName(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// Config configures a Node. Every duration is wall time measured with
// the monotonic clock.
type Config struct {
	Name string
	// ID is the member's Raft ID. 0 = IDFromName(Name), which founders
	// given the same peer list all derive alike.
	ID uint64
	// Identity is the data directory's (storage.Store.Identity): the cell
	// ID (0 for a joining member that has not heard from the cell yet)
	// and the incarnation every envelope carries.
	Identity storage.Identity
	// Members names (and, for transports that need them, addresses) the
	// members known at start, by Raft ID. Membership changes applied from
	// the log update it.
	Members   map[uint64]storage.MemberInfo
	Store     *storage.Store
	Transport transport.Transport
	Logger    *slog.Logger

	TickInterval   time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// CompactEvery is how many applied entries trigger a log compaction.
	CompactEvery uint64
	// CatchUpEntries is how many applied entries compaction keeps so a
	// briefly lagging follower catches up from the log, not a snapshot.
	CatchUpEntries uint64
	// MaxSizePerMsg bounds the entries in one append message (bytes).
	MaxSizePerMsg uint64
	// MaxProposalBytes bounds the commands of one proposal a follower
	// forwards; larger ones are dropped. 0 = 16 MiB (the TCP transport's
	// default frame limit).
	MaxProposalBytes int
	// OnApply is called after each applied batch, before the waiting
	// callers are woken. It runs on the apply goroutine, or on the raft
	// goroutine when that applies a small batch itself (inline applies,
	// apply.go); never on both at once, and always in log order. It must
	// not block: while it runs inline, the member neither ticks nor
	// steps nor sends heartbeats.
	OnApply func(storage.ApplyOutput)
	// OnSnapshot is called on the apply goroutine after a snapshot from
	// the leader replaced the state machine. It must not block for long.
	OnSnapshot func()
	// OnLeader is called on the raft loop whenever the known leader or the
	// term changes (lead 0 = none known). It must not block.
	OnLeader func(lead, term uint64)
	// OnMessage is called on the raft loop with each application message
	// (see Node.SendApp). It must not block.
	OnMessage func(from string, data []byte)
}

// Role is a member's Raft role.
type Role string

// The roles.
const (
	RoleFollower     Role = "follower"
	RoleCandidate    Role = "candidate"
	RolePreCandidate Role = "pre-candidate"
	RoleLeader       Role = "leader"
)

// Status is a point-in-time view of the member.
type Status struct {
	ID        uint64
	Name      string
	Role      Role
	Leader    uint64 // 0 = none known
	Term      uint64
	Commit    uint64
	Applied   uint64
	LastIndex uint64
	Voters    []uint64
	Learners  []uint64
	// LogSyncs counts the fsyncs of the Raft log since Start, and
	// LogEntries the entries they made durable: their ratio is the group
	// commit factor.
	LogSyncs   uint64
	LogEntries uint64
	// Dropped counts the messages from peers refused since Start because
	// Raft must not see them (malformed, wrong sender, impossible terms
	// or indexes); each is logged, at most once a second.
	Dropped uint64
}

// Node runs one member: the driver of its consensus core (core.go),
// which carries out what the core asks with the real clock, transport
// and store. Its methods are safe for concurrent use.
type Node struct {
	cfg   Config
	id    uint64
	log   *slog.Logger
	store *storage.Store
	sm    *storage.StateMachine
	tr    transport.Transport
	c     *core // driven by the raft loop

	propc chan *proposal
	readc chan *readRequest
	runc  chan func() // closures run on the raft loop (reports from other goroutines)
	// peerDownc carries the transport's reports of closed connections
	// (failover.go).
	peerDownc chan string
	// applySide is the state machine's side of the node, which the raft
	// loop and the apply loop take turns to hold (apply.go).
	applySide applySide
	persist   persister
	chunkc    chan *chunk
	stopc     chan struct{} // closed when the node starts stopping (Stop or failure)
	stopped   sync.Once
	failed    atomic.Pointer[error]
	wg        sync.WaitGroup

	applied  appliedIndex
	senders  snapshotSenders
	syncs    atomic.Uint64 // fsyncs of the raft log
	synced   atomic.Uint64 // entries made durable by them
	counters counters      // events for metrics (metrics.go)
	electTTL time.Duration // one election timeout, wall time
	gate     pauseGate
	// contactBase and contactAt say when the core last said it was in
	// contact (LastContact): contactAt nanoseconds after contactBase, 0
	// for never.
	contactBase time.Time
	contactAt   atomic.Int64
	// peersMu orders the transport peer changes of the apply side (the
	// address book's) and of the raft loop (strangers', changePeers), so
	// a stranger's expiry never removes a peer the book just added.
	peersMu sync.Mutex
}

// Start opens the member on cfg.Store (which must be bootstrapped or hold
// an earlier run's state) and starts its goroutines.
func Start(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg:         cfg,
		id:          cmp.Or(cfg.ID, IDFromName(cfg.Name)),
		log:         cfg.Logger,
		store:       cfg.Store,
		sm:          cfg.Store.StateMachine(),
		tr:          cfg.Transport,
		propc:       make(chan *proposal, 4096),
		readc:       make(chan *readRequest, 4096),
		runc:        make(chan func(), 64),
		peerDownc:   make(chan string, 16),
		chunkc:      make(chan *chunk, 16),
		stopc:       make(chan struct{}),
		electTTL:    time.Duration(cfg.ElectionTicks) * cfg.TickInterval,
		contactBase: time.Now(),
	}
	if err := cfg.Store.Fault(); err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	peers, err := n.store.PeerIncarnations()
	if err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	if removed, err := n.sm.WasRemoved(n.id); err != nil || removed {
		if err != nil {
			return nil, fmt.Errorf("raftnode: %w", err)
		}
		return nil, fmt.Errorf("%w: member %q was removed; its name cannot be used again: "+
			"add the process back under a new name with an empty data directory", errs.Removed, cfg.Name)
	}
	var connected func(string) bool
	if w, ok := cfg.Transport.(transport.PeerWatcher); ok {
		connected = w.Connected
	}
	n.c, err = newCore(coreConfig{
		ID: n.id, Name: cfg.Name, Identity: cfg.Identity, Peers: peers,
		ElectionTicks: cfg.ElectionTicks, HeartbeatTicks: cfg.HeartbeatTicks,
		LogEveryTicks:    uint64(max(dropLogEvery/max(cfg.TickInterval, 1), 1)),
		MaxProposalBytes: cfg.MaxProposalBytes,
		Logger:           cfg.Logger,
		Log:              cfg.Store.RaftLog(),
		Store:            cfg.Store,
		State:            n.sm,
		Connected:        connected,
		Seed:             rand.Uint64(),
		Counters:         &n.counters,
		Raft: raft.Config{
			Applied:                   n.sm.AppliedIndex(),
			MaxSizePerMsg:             cfg.MaxSizePerMsg,
			MaxCommittedSizePerReady:  64 << 20,
			MaxUncommittedEntriesSize: 256 << 20,
			MaxInflightMsgs:           256,
			CheckQuorum:               true,
			PreVote:                   true,
			ReadOnlyOption:            raft.ReadOnlySafe,
			StepDownOnRemoval:         true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	n.setMembers(maps.Values(cfg.Members))
	n.applied.init(n.sm.AppliedIndex())
	n.applySide.init(n.sm.AppliedIndex())
	n.senders.init()
	n.gate.init()
	last, err := cfg.Store.RaftLog().LastIndex()
	if err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	n.persist.init(last)
	n.watchPeers()
	n.gateStrangers()
	if f, ok := cfg.Transport.(transport.Freezer); ok {
		n.wg.Add(1)
		go n.guard("freeze follower", func() { n.followFreezes(f) })
	}
	n.wg.Add(3)
	go n.guard("raft loop", n.raftLoop)
	go n.guard("apply loop", n.applyLoop)
	go n.guard("snapshot receiver", n.receiveChunks)
	return n, nil
}

// ID returns the member's Raft ID.
func (n *Node) ID() uint64 { return n.id }

// MemberName returns the name of the member with Raft ID id.
func (n *Node) MemberName(id uint64) (string, bool) { return n.c.book.name(id) }

// MemberID returns the Raft ID of the member named name.
func (n *Node) MemberID(name string) (uint64, bool) { return n.c.book.id(name) }

// setMembers adds members to the address book and tells the transport
// their addresses.
func (n *Node) setMembers(ms iter.Seq[storage.MemberInfo]) {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	changed := n.c.book.set(ms)
	// The applied membership confirms the strangers it names: the book
	// addresses them from now on.
	n.c.strangers.forget(func(name string) bool { _, ok := n.c.book.id(name); return ok })
	if adder, ok := n.tr.(transport.PeerAdder); ok {
		for _, m := range changed {
			if m.Name != n.cfg.Name && m.Addr != "" {
				adder.AddPeer(m.Name, m.Addr)
			}
		}
	}
}

// reloadMembers refreshes the address book from the replicated state,
// after a membership change or a snapshot. A member the book no longer
// has was removed: it is forgotten, so nothing it says reaches Raft or
// the application. The transport keeps its peer a while (the newest
// removedKept), so that it can be told it was removed (standing.go);
// past that the transport refuses it.
func (n *Node) reloadMembers() {
	ms, err := n.sm.Members()
	if err != nil {
		n.log.Warn("read members", "err", err)
		return
	}
	if len(ms) == 0 {
		return // an old store without an address book: keep what we know
	}
	keep := make(map[uint64]bool, len(ms))
	for _, m := range ms {
		keep[m.ID] = true
	}
	gone := n.c.book.keepOnly(keep, n.cfg.Name)
	n.setMembers(slices.Values(ms))
	drop := n.c.rememberRemoved(gone, func(name string) bool {
		_, ok := n.MemberID(name)
		return ok
	})
	if remover, ok := n.tr.(transport.PeerRemover); ok {
		n.peersMu.Lock()
		defer n.peersMu.Unlock()
		for _, name := range drop {
			if _, back := n.MemberID(name); !back {
				remover.RemovePeer(name)
			}
		}
	}
}

// SendApp sends an application message to member to, delivered to its
// Config.OnMessage. Like every message, it may be lost.
func (n *Node) SendApp(to string, data []byte) error {
	return n.tr.Send([]transport.Envelope{{From: n.cfg.Name, To: to, Data: n.c.hdr().encodeApp(data)}})
}

// guard runs a goroutine and turns a panic (raft's invariants, Pebble
// corruption) into the node's error instead of a crash of the process
// that embeds us.
func (n *Node) guard(name string, f func()) {
	defer n.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			n.fail(fmt.Errorf("%w: %s panicked: %v", errs.Internal, name, r))
		}
	}()
	f()
}

// Fail stops the member with err, as a fault of its own would: Err
// reports it and Done closes. The embedding layer uses it for faults the
// node cannot see, such as the store's background faults.
func (n *Node) Fail(err error) { n.fail(err) }

// fail records the first fatal error and stops the node.
func (n *Node) fail(err error) {
	if n.failed.CompareAndSwap(nil, &err) {
		n.log.Error("node failed", "err", err)
	}
	n.stop()
}

func (n *Node) stop() {
	n.stopped.Do(func() { close(n.stopc) })
}

// Err returns the error that stopped the node, or nil.
func (n *Node) Err() error {
	if p := n.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Done is closed when the node stops, by Stop or by failure.
func (n *Node) Done() <-chan struct{} { return n.stopc }

// Stop stops the node. When it is the leader and graceful is true, it
// first hands leadership to the most up-to-date follower so the cell does
// not wait an election timeout. Stop returns once every goroutine ended.
func (n *Node) Stop(graceful bool) {
	// A paused member cannot hand over: it is as good as stopped.
	if graceful && !n.gate.isPaused() {
		n.transferLeadership()
	}
	n.stop()
	n.wg.Wait()
	n.senders.wait()
	n.c.FailCallers(errs.Closed)
}

func (n *Node) transferLeadership() {
	st := n.Status()
	if st.Role != RoleLeader || len(st.Voters) < 2 {
		return
	}
	transferring := make(chan bool, 1)
	n.runOnLoop(func() { transferring <- n.c.transferTarget() })
	select {
	case ok := <-transferring:
		if !ok {
			return
		}
	case <-n.stopc:
		return
	case <-time.After(n.electTTL):
		return // paused meanwhile (Pause): there is nobody to hand over
	}
	deadline := time.After(2 * n.electTTL)
	// The hand-over takes a round trip or two, far less than a tick:
	// look often, so Close returns soon after it.
	tick := time.NewTicker(min(n.cfg.TickInterval, 2*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-deadline:
			return
		case <-n.stopc:
			return
		case <-tick.C:
			if st := n.Status(); st.Leader != n.id {
				return
			}
		}
	}
}

// TransferLeader hands leadership from this member, which must lead
// (leading false otherwise, nothing done), to the voter id, and waits
// until this member sees id lead. It gives up, with errs.NoQuorum, after
// two election timeouts (Raft abandons a transfer the target has not
// completed within one) or when ctx ends.
func (n *Node) TransferLeader(ctx context.Context, id uint64) (leading bool, err error) {
	started := make(chan bool, 1)
	n.runOnLoop(func() { started <- n.c.transferTo(id) })
	select {
	case leading = <-started:
		if !leading {
			return false, nil
		}
	case <-n.stopc:
		return false, errs.Closed
	case <-ctx.Done():
		return true, fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
	}
	deadline := time.After(2 * n.electTTL)
	tick := time.NewTicker(min(n.cfg.TickInterval, 2*time.Millisecond))
	defer tick.Stop()
	for {
		if n.Status().Leader == id {
			return true, nil
		}
		select {
		case <-deadline:
			return true, fmt.Errorf("%w: leadership did not move within two election timeouts", errs.NoQuorum)
		case <-ctx.Done():
			return true, fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
		case <-n.stopc:
			return true, errs.Closed
		case <-tick.C:
		}
	}
}

// runOnLoop queues f to run on the raft loop; it gives up if the node stops.
func (n *Node) runOnLoop(f func()) {
	select {
	case n.runc <- f:
	case <-n.stopc:
	}
}

// Status returns the member's current status.
func (n *Node) Status() Status {
	st := *n.c.status.Load()
	st.Applied = n.applied.get()
	st.LogSyncs, st.LogEntries = n.syncs.Load(), n.synced.Load()
	st.Dropped = n.c.drops.Load()
	// Read the log's end now: the status is published before some
	// appends, so an idle member would report a stale one.
	st.LastIndex, _ = n.store.RaftLog().LastIndex()
	// Read here rather than at each Ready: the raft loop publishes its
	// status after every append, and copying the membership each time
	// was a measurable share of its work.
	cs := n.sm.ConfState()
	st.Voters, st.Learners = cs.GetVoters(), cs.GetLearners()
	return st
}

// errStopped is what callers get once the node is stopping.
func (n *Node) errStopped() error {
	if err := n.Err(); err != nil {
		return fmt.Errorf("%w: %w", errs.Closed, err)
	}
	return errs.Closed
}

func roleOf(s raft.StateType) Role {
	switch s {
	case raft.StateLeader:
		return RoleLeader
	case raft.StateCandidate:
		return RoleCandidate
	case raft.StatePreCandidate:
		return RolePreCandidate
	default:
		return RoleFollower
	}
}
