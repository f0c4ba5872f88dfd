package raftnode

import (
	"log/slog"
	"math/rand/v2"
	"sync/atomic"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// The consensus core: the raft.RawNode and every piece of bookkeeping
// around it (proposals, their resends and answers, read-index rounds,
// membership changes and their retries, leadership and contact, the wire
// validation), with no goroutine, no I/O of its own and no clock but its
// ticks. Whoever drives it (the raft loop, loop.go; a test, core_test.go)
// feeds it ticks, envelopes, proposals and reads, and carries out what
// each Ready asks: persist, send, apply, answer. Driven the same way, two
// cores do the same thing, which is what lets a test run a cell tick by
// tick and compare its transcript (raftnode/testdata).
//
// Callers' goroutines and the apply side touch only the parts that say
// so, each under its own lock: the waiter tables (a caller that gives up
// must learn at once whether its command was handed to Raft), the
// address book and the published status. The rest belongs to the driver.

// coreStore is what the core writes itself: the identity records that
// must be durable before anything a peer says is believed (identity.go).
type coreStore interface {
	SaveIdentity(storage.Identity) (storage.Identity, error)
	SavePeerIncarnation(id, incarnation uint64) error
}

// coreState is what the core reads of the replicated state.
type coreState interface {
	ConfState() *pb.ConfState
	ProposerResult(*command.Proposer) (command.Result, bool)
	WasRemoved(id uint64) (bool, error)
	StagedComplete(index, term uint64) bool
}

// coreConfig configures a core.
type coreConfig struct {
	ID             uint64
	Name           string
	Identity       storage.Identity
	Peers          map[uint64]uint64 // Raft ID -> first incarnation heard (durable)
	ElectionTicks  int
	HeartbeatTicks int
	// LogEveryTicks is how often, in ticks, one kind of refusal may be
	// logged; 0: every time.
	LogEveryTicks    uint64
	MaxProposalBytes int
	Logger           *slog.Logger
	// Log is the Raft log (raft.Storage); Store and State as above.
	Log   raft.Storage
	Store coreStore
	State coreState
	// Raft is the rest of Raft's configuration (sizes, Applied); ID,
	// ticks, Storage and Logger are set from the fields above.
	Raft raft.Config
	// Connected, if not nil, says whether the transport has an open
	// connection with a member (failover.go); nil: it cannot tell.
	Connected func(name string) bool
	// Seed seeds the core's own choices (the turns of failover.go).
	Seed     uint64
	Counters *counters
	// IDOf, if not nil, derives a member's Raft ID from its name in
	// place of IDFromName (tests whose members have small IDs).
	IDOf func(name string) uint64
}

// core is one member's consensus core.
type core struct {
	cfg   coreConfig
	id    uint64
	name  string
	log   *slog.Logger
	rn    *raft.RawNode
	rlog  raft.Storage
	store coreStore
	sm    coreState
	rnd   *rand.Rand

	// Shared, each under its own lock or atomic.
	waiters   waiters
	confs     confWaiters
	book      addressBook
	strangers strangers // members not in the book yet (strangers.go)
	ident     identity
	stand     standing
	status    atomic.Pointer[Status]
	drops     atomic.Uint64 // messages refused by the checks in validate.go
	counters  *counters

	// The driver's: touched only by whoever calls Tick, Step, Ready.
	tick    uint64
	pending []*proposal // wait for a leader
	handed  []*proposal // given to Raft, waiting to apply
	// resendAll asks for every handed command to be handed again once a
	// leader is known: the term changed (resend.go).
	resendAll bool
	reads     readState
	lead      uint64
	term      uint64
	// leaderlessSince is the tick at which the member last lost sight of
	// a leader; meaningful only while lead == 0.
	leaderlessSince uint64
	loss            leaderLoss   // failover.go
	refused         refusedProps // transfer.go
	lost            lossReports  // validate.go
	dropLog         rateLimit
	out             Ready // what the next Ready says beyond Raft's own
	spare           Ready // the buffers of the Ready before, for reuse
	fatal           error
}

// Ready is what the core asks of its driver. In this order: deliver
// Answers; with Fatal set, then stop with it and do nothing else. Else run
// OnLeader if LeaderChanged, stage Chunks, route Acks, hand Apps to the
// application, send Envelopes (none of these wait for the log). Then, if
// HasRaft: when Leader, send Messages and stream Snaps first (a leader
// may send before its own fsync, Raft thesis 10.2.1); install Snapshot
// (once every earlier committed entry applied) and deliver what
// SnapshotInstalled answers; persist HardState and Entries (with an
// fsync if MustSync); when not Leader, send Messages and stream Snaps
// now (a follower's acknowledgements promise durability); apply
// CommittedEntries with ConfState and deliver what Applied answers.
// Last, Advance.
type Ready struct {
	Fatal         error
	Answers       []answer
	LeaderChanged bool
	Lead, Term    uint64
	// Contact is set when the member was in contact with the cell at a
	// tick since the last Ready (standing.go).
	Contact bool
	Chunks  []*chunk
	Acks    []*chunkAck
	Apps    []appMessage
	// Peers are transport peers to add or remove before anything is sent
	// (strangers.go).
	Peers     []peerChange
	Envelopes []transport.Envelope

	HasRaft          bool
	Leader           bool
	Messages         []transport.Envelope
	Snaps            []snapSend
	Snapshot         *pb.Snapshot // nil: none
	HardState        *pb.HardState
	Entries          []*pb.Entry
	MustSync         bool
	CommittedEntries []*pb.Entry
	ConfState        *pb.ConfState // after CommittedEntries, when they changed it

	rd raft.Ready
}

// appMessage is an application message for Config.OnMessage.
type appMessage struct {
	from string
	data []byte
}

// snapSend is a MsgSnap the driver streams to member to (snapshot.go).
type snapSend struct {
	m  *pb.Message
	to string
}

// answer is what one caller gets: exactly one of prop, read and conf is
// set. The core has already removed the caller's waiter, so whoever holds
// the answer is the only one to deliver it.
type answer struct {
	prop  *proposal
	read  *readRequest
	conf  *confWaiter
	res   command.Result
	index uint64
	err   error
}

// deliver wakes the caller. It never blocks: each channel has room for
// its one answer.
func (a *answer) deliver() {
	switch {
	case a.prop != nil:
		a.prop.resc <- proposalResult{res: a.res, err: a.err}
	case a.read != nil:
		a.read.resc <- readResult{index: a.index, err: a.err}
	case a.conf != nil:
		close(a.conf.done)
	}
}

func deliverAll(as []answer) {
	for i := range as {
		as[i].deliver()
	}
}

// newCore builds a core over the Raft log and state in cfg.
func newCore(cfg coreConfig) (*core, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Counters == nil {
		cfg.Counters = &counters{}
	}
	c := &core{
		cfg:      cfg,
		id:       cfg.ID,
		name:     cfg.Name,
		log:      cfg.Logger,
		rlog:     cfg.Log,
		store:    cfg.Store,
		sm:       cfg.State,
		rnd:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		counters: cfg.Counters,
	}
	c.waiters.init()
	c.confs.init()
	c.book.init()
	c.strangers.init()
	c.initIdentity(cfg.Identity, cfg.Peers)
	c.initStanding()
	rc := cfg.Raft
	rc.ID = cfg.ID
	rc.ElectionTick = cfg.ElectionTicks
	rc.HeartbeatTick = cfg.HeartbeatTicks
	rc.Storage = cfg.Log
	rc.Logger = raftLogger{cfg.Logger.With("component", "raft")}
	rn, err := raft.NewRawNode(&rc)
	if err != nil {
		return nil, err
	}
	c.rn = rn
	c.publishStatus()
	return c, nil
}

// Tick advances the core by one tick: Raft's timers, and every wait the
// bookkeeping counts in ticks.
func (c *core) Tick() {
	if c.fatal != nil {
		return
	}
	c.tick++
	c.rn.Tick()
	c.onTick()
}

// Step takes one envelope from the network: validated, then stepped into
// Raft or turned into what the next Ready says (chunks, acks,
// application messages, notices).
func (c *core) Step(env transport.Envelope) {
	if c.fatal != nil {
		return
	}
	c.handleEnvelope(env)
}

// Propose queues p for Raft; Flush hands what is queued over, in one
// proposal, once a leader is known.
func (c *core) Propose(p *proposal) {
	p.queuedTick = c.tick
	c.pending = append(c.pending, p)
}

// Read queues a read-index request; Flush starts a round.
func (c *core) Read(r *readRequest) {
	r.queuedTick = c.tick
	c.reads.queued = append(c.reads.queued, r)
}

// Flush hands Raft what was queued since the last one, if a leader is
// known: proposals refused during a hand-over, new proposals (one
// MsgProp for all) and a read-index round.
func (c *core) Flush() {
	if c.lead == 0 {
		return
	}
	c.retryRefused()
	c.flushProposals()
	c.issueReads()
}

// HasReady reports whether Ready has anything to say.
func (c *core) HasReady() bool {
	o := &c.out
	return c.fatal != nil || len(o.Answers) > 0 || o.Contact || len(o.Chunks) > 0 || len(o.Acks) > 0 ||
		len(o.Apps) > 0 || len(o.Peers) > 0 || len(o.Envelopes) > 0 || c.rn.HasReady()
}

// Ready returns what the driver must do now (see Ready). What it holds
// is the driver's until it passes it back to Advance; Answers in
// particular are delivered exactly once, by the driver.
func (c *core) Ready() Ready {
	var r raft.Ready
	var bs raft.BasicStatus
	has := c.fatal == nil && c.rn.HasReady()
	if has {
		r = c.rn.Ready()
		bs = c.rn.BasicStatus()
		c.noteLeader(bs.Lead, bs.HardState.GetTerm())
		for _, rs := range r.ReadStates {
			c.completeRead(rs.RequestCtx, rs.Index)
		}
		c.out.Messages, c.out.Snaps = c.encode(r.Messages)
	}
	rd := c.out
	c.out = c.spare
	c.spare = Ready{}
	rd.Fatal = c.fatal
	if !has {
		return rd
	}
	rd.HasRaft, rd.rd = true, r
	rd.Leader = bs.RaftState == raft.StateLeader
	if !raft.IsEmptySnap(r.Snapshot) {
		rd.Snapshot = r.Snapshot
	}
	if len(r.Entries) > 0 || !raft.IsEmptyHardState(r.HardState) {
		rd.HardState, rd.Entries, rd.MustSync = r.HardState, r.Entries, r.MustSync
	}
	rd.CommittedEntries = r.CommittedEntries
	if len(r.CommittedEntries) > 0 {
		rd.ConfState = c.applyConfChanges(r.CommittedEntries)
	}
	return rd
}

// Advance tells the core that rd was carried out.
func (c *core) Advance(rd Ready) {
	if rd.HasRaft {
		c.rn.Advance(rd.rd)
		if rd.rd.SoftState != nil || rd.rd.HardState != nil || len(rd.rd.Entries) > 0 {
			c.publishStatus()
		}
	}
	// Keep rd's buffers for the Ready after next.
	clear(rd.Answers)
	clear(rd.Chunks)
	clear(rd.Acks)
	clear(rd.Apps)
	clear(rd.Peers)
	clear(rd.Envelopes)
	clear(rd.Messages)
	clear(rd.Snaps)
	c.spare = Ready{
		Answers: rd.Answers[:0], Chunks: rd.Chunks[:0], Acks: rd.Acks[:0], Apps: rd.Apps[:0], Peers: rd.Peers[:0],
		Envelopes: rd.Envelopes[:0], Messages: rd.Messages[:0], Snaps: rd.Snaps[:0],
	}
	// A new leader learnt from this Ready gets the commands the old one
	// may have lost at once, not at the next tick.
	if c.resendAll && c.lead != 0 {
		c.resendAll = false
		c.resendDue(true)
	}
}

// encode turns Raft's messages into envelopes, and sets the snapshot
// messages apart: their state streams ahead of them (snapshot.go).
func (c *core) encode(msgs []*pb.Message) ([]transport.Envelope, []snapSend) {
	envs, snaps := c.out.Messages[:0], c.out.Snaps[:0]
	for _, m := range msgs {
		to, ok := c.peerName(m.GetTo())
		if !ok {
			continue
		}
		envs = c.tellAddress(envs, m, to)
		if m.GetType() == pb.MsgSnap {
			snaps = append(snaps, snapSend{m: m, to: to})
			continue
		}
		data, err := c.hdr().encodeRaft(m)
		if err != nil {
			c.log.Error("encode raft message", "err", err)
			continue
		}
		envs = append(envs, transport.Envelope{From: c.name, To: to, Data: data})
	}
	return envs, snaps
}

// answerErr answers p's caller with err, if it still waits.
func (c *core) answerErr(p *proposal, err error) {
	if c.waiters.take(p.id) != nil {
		c.out.Answers = append(c.out.Answers, answer{prop: p, err: err})
	}
}

// Applied takes the results of an applied batch and appends to buf the
// answers of the callers that wait for them. The apply side calls it;
// it touches only the waiter table.
func (c *core) Applied(results []storage.Applied, buf []answer) []answer {
	return c.waiters.applied(results, buf)
}

// SnapshotInstalled answers the callers a snapshot may have overtaken,
// once it replaced the state machine: every entry committed before it
// either applied (and answered its caller) or is inside it, and so is
// the proposer table, which holds the result of each command inside it.
// The others were not inside it; they apply later or are handed to Raft
// again (resend.go), and never apply twice.
func (c *core) SnapshotInstalled() []answer {
	var as []answer
	c.waiters.mu.Lock()
	for _, p := range c.waiters.m {
		if !p.handed.Load() {
			continue
		}
		if res, ok := c.sm.ProposerResult(&p.prop); ok {
			c.waiters.removeLocked(p, false)
			as = append(as, answer{prop: p, res: res})
		}
	}
	c.waiters.mu.Unlock()
	return as
}

// Stopped returns the answers not yet handed out, and answers every
// caller the core still holds (queued proposals and reads) with err: the
// driver stops driving it.
func (c *core) Stopped(err error) []answer {
	c.reads.failAll(err, &c.out.Answers)
	for _, p := range c.pending {
		c.answerErr(p, err)
	}
	c.pending = nil
	as := c.out.Answers
	c.out.Answers = nil
	return as
}

// FailCallers ends every caller still waiting for its command with err
// (ErrAmbiguous as well for those handed to Raft): the member stopped.
// Callers may call it from any goroutine.
func (c *core) FailCallers(err error) { c.waiters.failAll(err) }

// ReportSnapshot tells Raft how streaming a snapshot to member id ended.
func (c *core) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	c.rn.ReportSnapshot(id, status)
}

// setFatal stops the core with err (the first one counts).
func (c *core) setFatal(err error) {
	if c.fatal == nil {
		c.fatal = err
	}
}

// publishStatus publishes Raft's view for Status and the wire checks.
func (c *core) publishStatus() {
	bs := c.rn.BasicStatus()
	last, _ := c.rlog.LastIndex()
	c.status.Store(&Status{
		ID: c.id, Name: c.name, Role: roleOf(bs.RaftState), Leader: bs.Lead,
		Term: bs.HardState.GetTerm(), Commit: bs.HardState.GetCommit(), LastIndex: last,
	})
}
