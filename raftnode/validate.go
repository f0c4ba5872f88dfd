package raftnode

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Everything a peer sends is checked here before Raft or the snapshot
// receiver sees it (invariant 11 of ARCHITECTURE.md). Raft trusts its input:
// an empty proposal, a heartbeat committing past our log, an undecodable
// conf change or a snapshot with a malformed ConfState make it panic.
// The checks use only fields already decoded and what the core
// already knows (the last published Status, the log's last index), so
// they cost a few comparisons per message and allocate nothing unless
// the message is dropped.
//
// The sender's identity is the transport's: env.From is the member the
// connection authenticated, and every ID a message carries about its
// sender must be that member's.

// The reasons a message is dropped; errors.Is-able for tests.
var (
	errDropType       = errors.New("raftnode: message type may not cross the network")
	errDropSender     = errors.New("raftnode: sender is not a member")
	errDropFrom       = errors.New("raftnode: message From is not its sender")
	errDropTo         = errors.New("raftnode: message To is not this member")
	errDropTerm       = errors.New("raftnode: message term out of range")
	errDropNotLeader  = errors.New("raftnode: leader's message from a member that does not lead this term")
	errDropCommit     = errors.New("raftnode: heartbeat commits past this member's log")
	errDropEntries    = errors.New("raftnode: malformed entries")
	errDropIndex      = errors.New("raftnode: index out of range")
	errDropProposal   = errors.New("raftnode: malformed proposal")
	errDropConfChange = errors.New("raftnode: refused membership change")
	errDropSnapshot   = errors.New("raftnode: malformed snapshot")
	errDropChunk      = errors.New("raftnode: refused snapshot chunk")
)

const (
	// defaultMaxProposalBytes bounds the commands of one forwarded
	// proposal: the TCP transport's default frame limit, past which the
	// follower could not have sent it anyway.
	defaultMaxProposalBytes = 16 << 20
	// maxChunkBytes bounds one snapshot chunk's data; the state machine
	// cuts chunks of about 1 MiB.
	maxChunkBytes = 8 << 20
	// maxReadCtxBytes bounds a read-index request's context (ours are 8
	// bytes).
	maxReadCtxBytes = 64
	// dropLogEvery is how often a dropped message may be logged (in
	// the core's ticks: coreConfig.LogEveryTicks).
	dropLogEvery = time.Second
)

// wireTypes are the Raft messages a member may send another. Local ones
// (Hup, Beat, CheckQuorum, Unreachable, SnapStatus, the storage
// messages) never leave a member; nor does MsgForgetLeader, which Raft
// does not count as local but which only the member itself may step.
var wireTypes = [...]bool{
	pb.MsgApp:            true,
	pb.MsgAppResp:        true,
	pb.MsgVote:           true,
	pb.MsgVoteResp:       true,
	pb.MsgPreVote:        true,
	pb.MsgPreVoteResp:    true,
	pb.MsgHeartbeat:      true,
	pb.MsgHeartbeatResp:  true,
	pb.MsgSnap:           true,
	pb.MsgTimeoutNow:     true,
	pb.MsgProp:           true, // forwarded by followers
	pb.MsgReadIndex:      true, // forwarded by followers
	pb.MsgReadIndexResp:  true,
	pb.MsgTransferLeader: true, // forwarded by followers
}

func isWireType(t pb.MessageType) bool {
	return int(t) >= 0 && int(t) < len(wireTypes) && wireTypes[t]
}

// memberID returns the Raft ID of member name, if it is a member other
// than this one.
func (c *core) memberID(name string) (uint64, bool) {
	if name == c.name {
		return 0, false
	}
	return c.book.id(name)
}

// senderID returns the Raft ID of name, a member other than this one or
// a stranger admitted for what it sent (strangers.go, admit).
func (c *core) senderID(name string) (uint64, bool) {
	if id, ok := c.memberID(name); ok {
		return id, true
	}
	if name == c.name {
		return 0, false
	}
	return c.strangers.id(name)
}

// checkRaft returns why m, received from member from, must not reach
// Raft, or nil.
func (c *core) checkRaft(from string, m *pb.Message) error {
	typ := m.GetType()
	if !isWireType(typ) {
		return errDropType
	}
	id, ok := c.senderID(from)
	if !ok {
		return errDropSender
	}
	if m.GetFrom() != id {
		return errDropFrom
	}
	if m.GetTo() != c.id {
		return errDropTo
	}
	term := m.GetTerm()
	if typ == pb.MsgProp || typ == pb.MsgReadIndex {
		// Forwarded requests carry no term; one that did would make Raft
		// step down to it.
		if term != 0 {
			return errDropTerm
		}
	} else if term == 0 {
		return errDropTerm
	}
	// The view as of the last Ready: within a batch Raft may have moved
	// to a later term, which only makes the checks below more lenient.
	st := c.status.Load()
	switch typ {
	case pb.MsgApp:
		if err := checkLeader(st, id, term); err != nil {
			return err
		}
		return checkAppend(m)
	case pb.MsgHeartbeat:
		if err := checkLeader(st, id, term); err != nil {
			return err
		}
		// A leader never commits past what we acknowledged as durable;
		// if it thinks so we lost our log (a wiped data directory):
		// stepFromWire counts the report (lostState), so this check
		// stays free of effects.
		if last, _ := c.rlog.LastIndex(); m.GetCommit() > last {
			return errDropCommit
		}
	case pb.MsgSnap:
		if err := checkLeader(st, id, term); err != nil {
			return err
		}
		return checkSnapshot(m)
	case pb.MsgTimeoutNow:
		if term != st.Term || st.Leader != id {
			return errDropNotLeader
		}
	case pb.MsgReadIndexResp:
		if term == st.Term && st.Leader != id {
			return errDropNotLeader
		}
		if len(m.GetEntries()) != 1 {
			return errDropEntries
		}
	case pb.MsgAppResp:
		// Followers acknowledge only what we sent: what our log holds.
		last, _ := c.rlog.LastIndex()
		if m.GetIndex() > last || (m.GetReject() && m.GetRejectHint() > m.GetIndex()) {
			return errDropIndex
		}
	case pb.MsgVote, pb.MsgPreVote:
		if m.GetLogTerm() > term {
			return errDropTerm
		}
	case pb.MsgProp:
		return c.checkProposal(id, m.GetEntries())
	case pb.MsgReadIndex:
		if ents := m.GetEntries(); len(ents) != 1 || len(ents[0].GetData()) > maxReadCtxBytes {
			return errDropEntries
		}
	case pb.MsgTransferLeader:
		if !isVoter(c.sm.ConfState(), id) {
			return errDropSender
		}
		// Only the leader acts on it. A follower would forward it to the
		// leader as it came, with its term set, and Raft panics on sending
		// a MsgTransferLeader that carries a term.
		if st.Role != RoleLeader {
			return errDropNotLeader
		}
	}
	return nil
}

// checkLeader refuses a leader's message at our current term from
// anyone but the leader we know for it: Raft has one leader per term.
func checkLeader(st *Status, from, term uint64) error {
	if term == st.Term && st.Leader != 0 && st.Leader != from {
		return errDropNotLeader
	}
	return nil
}

// checkAppend checks that an append's entries follow its anchor: Raft
// assumes contiguous indexes and non-decreasing terms, and panics on a
// slice that conflicts with its committed log in impossible ways.
func checkAppend(m *pb.Message) error {
	term, prev := m.GetTerm(), m.GetIndex()
	logTerm := m.GetLogTerm()
	if logTerm > term {
		return errDropTerm
	}
	ents := m.GetEntries()
	if prev > math.MaxUint64-uint64(len(ents)) {
		return errDropIndex
	}
	for i, e := range ents {
		if e.GetIndex() != prev+1+uint64(i) {
			return errDropEntries
		}
		et := e.GetTerm()
		if et == 0 || et < logTerm || et > term {
			return errDropEntries
		}
		logTerm = et
		switch e.GetType() {
		case pb.EntryNormal:
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			// Rare, so worth decoding: a malformed one would panic Raft
			// when it applies. Whether it fits the configuration was the
			// proposing leader's check.
			if _, err := decodeConfChange(e); err != nil {
				return err
			}
		default:
			return errDropEntries
		}
	}
	return nil
}

// checkProposal checks commands a follower forwarded: at least one, each
// a command in a format we know or a well-formed membership change from
// a voter, none claiming a place in the log, the lot within the bound.
func (c *core) checkProposal(from uint64, ents []*pb.Entry) error {
	if len(ents) == 0 {
		return errDropProposal
	}
	limit := c.cfg.MaxProposalBytes
	if limit <= 0 {
		limit = defaultMaxProposalBytes
	}
	size := 0
	for _, e := range ents {
		if e.GetIndex() != 0 || e.GetTerm() != 0 {
			return errDropProposal
		}
		data := e.GetData()
		size += len(data)
		if size > limit {
			return errDropProposal
		}
		switch e.GetType() {
		case pb.EntryNormal:
			// An unknown format would stop every member at apply.
			if len(data) == 0 || data[0] == 0 || data[0] > command.Version {
				return errDropProposal
			}
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			if err := c.checkConfChange(from, e); err != nil {
				return err
			}
		default:
			return errDropProposal
		}
	}
	return nil
}

// checkConfChange accepts a membership change only from a voter (or a
// learner's update of its own record: its client address), and only the
// single-step changes this package makes, which Raft can apply to the
// current configuration without panicking.
func (c *core) checkConfChange(from uint64, e *pb.Entry) error {
	cs := c.sm.ConfState()
	ch, err := decodeConfChange(e)
	if err != nil {
		return err
	}
	own := ch.GetType() == pb.ConfChangeUpdateNode && ch.GetNodeId() == from && slices.Contains(cs.GetLearners(), from)
	if !isVoter(cs, from) && (!own || movesPeer(e)) {
		// A learner announces its client address; moving a member's
		// transport address (its own too) is a voter's change.
		return errDropConfChange
	}
	id := ch.GetNodeId()
	removes := ch.GetType() == pb.ConfChangeRemoveNode || ch.GetType() == pb.ConfChangeAddLearnerNode
	if removes && isVoter(cs, id) && len(cs.GetVoters()) == 1 {
		return errDropConfChange // the last voter
	}
	return nil
}

// movesPeer reports whether the conf change entry e (one decodeConfChange
// accepted) names a new transport address: an UpdateMember, or a context
// that cannot be read, which is treated as one.
func movesPeer(e *pb.Entry) bool {
	cc, err := unmarshalConfChange(e)
	if err != nil {
		return true
	}
	m, err := command.DecodeMember(cc.GetContext())
	return err != nil || m.PeerAddr != ""
}

// unmarshalConfChange reads a conf change entry of either version as a
// ConfChangeV2.
func unmarshalConfChange(e *pb.Entry) (*pb.ConfChangeV2, error) {
	var cc pb.ConfChangeV2
	switch e.GetType() {
	case pb.EntryConfChangeV2:
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return nil, errDropConfChange
		}
	case pb.EntryConfChange:
		var v1 pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &v1); err != nil {
			return nil, errDropConfChange
		}
		cc = *v1.AsV2()
	default:
		return nil, errDropConfChange
	}
	return &cc, nil
}

// decodeConfChange decodes a conf change entry that makes exactly one
// known change to a non-zero ID, without joint consensus (this package
// never uses it), and returns that change.
func decodeConfChange(e *pb.Entry) (*pb.ConfChangeSingle, error) {
	cc, err := unmarshalConfChange(e)
	if err != nil {
		return nil, err
	}
	if cc.GetTransition() != pb.ConfChangeTransitionAuto || len(cc.GetChanges()) != 1 {
		return nil, errDropConfChange
	}
	ch := cc.GetChanges()[0]
	if ch.GetNodeId() == 0 {
		return nil, errDropConfChange
	}
	switch ch.GetType() {
	case pb.ConfChangeAddNode, pb.ConfChangeRemoveNode, pb.ConfChangeUpdateNode, pb.ConfChangeAddLearnerNode:
		return ch, nil
	default:
		return nil, errDropConfChange
	}
}

// checkSnapshot checks a snapshot's metadata: Raft panics restoring a
// ConfState it cannot build a configuration from.
func checkSnapshot(m *pb.Message) error {
	s := m.GetSnapshot()
	md := s.GetMetadata()
	if s == nil || md.GetIndex() == 0 || md.GetTerm() == 0 || md.GetTerm() > m.GetTerm() {
		return errDropSnapshot
	}
	if !validConfState(md.GetConfState()) {
		return errDropSnapshot
	}
	return nil
}

// validConfState reports whether cs is a configuration this package can
// produce: at least one voter, no zero or repeated IDs, nobody both
// voter and learner, and no joint state.
func validConfState(cs *pb.ConfState) bool {
	voters, learners := cs.GetVoters(), cs.GetLearners()
	if len(voters) == 0 || len(cs.GetVotersOutgoing()) > 0 || len(cs.GetLearnersNext()) > 0 || cs.GetAutoLeave() {
		return false
	}
	// Quadratic, but configurations are a handful of members.
	seenBefore := func(id uint64, i int) bool {
		for j := range i {
			if at(voters, learners, j) == id {
				return true
			}
		}
		return false
	}
	for i := range len(voters) + len(learners) {
		if id := at(voters, learners, i); id == 0 || seenBefore(id, i) {
			return false
		}
	}
	return true
}

// at indexes the concatenation of a and b without building it.
func at(a, b []uint64, i int) uint64 {
	if i < len(a) {
		return a[i]
	}
	return b[i-len(a)]
}

func isVoter(cs *pb.ConfState, id uint64) bool {
	for _, v := range cs.GetVoters() {
		if v == id {
			return true
		}
	}
	return false
}

// checkChunk accepts a snapshot chunk only from the member Raft knows as
// the leader, naming itself, for a snapshot of a term not past ours.
func (c *core) checkChunk(from string, ch *chunk) error {
	id, ok := c.senderID(from)
	if !ok {
		return errDropSender
	}
	st := c.status.Load()
	if ch.From != id || st.Leader != id || ch.Index == 0 || ch.Term == 0 || ch.Term > st.Term || len(ch.Data) > maxChunkBytes {
		return errDropChunk
	}
	return nil
}

// checkAck accepts a chunk acknowledgement only from the member it names:
// acknowledgements are routed to the transfer by that ID.
func (c *core) checkAck(from string, a *chunkAck) error {
	if id, ok := c.senderID(from); !ok || a.From != id {
		return errDropChunk
	}
	return nil
}

// stepFromWire validates m and steps it into Raft. Should Raft still
// panic on some input no check foresaw, the core fails with
// errs.Internal (naming the message) instead of taking the host process
// down.
func (c *core) stepFromWire(from string, m *pb.Message) {
	if err := c.checkRaft(from, m); err != nil {
		if errors.Is(err, errDropCommit) {
			last, _ := c.rlog.LastIndex()
			c.lostState(from, m.GetCommit(), last)
		}
		c.dropped(from, m.GetType().String(), err)
		return
	}
	if m.GetType() == pb.MsgSnap {
		// The state streams ahead of the message (snapshot.go); Raft
		// must not take a snapshot we could not install.
		md := m.GetSnapshot().GetMetadata()
		if !c.sm.StagedComplete(md.GetIndex(), md.GetTerm()) {
			c.log.Debug("snapshot message before its state; dropped", "index", md.GetIndex())
			return
		}
	}
	defer func() {
		if r := recover(); r != nil {
			c.setFatal(fmt.Errorf("%w: raft panicked on %s from %s: %v", errs.Internal, m.GetType(), from, r))
		}
	}()
	err := c.rn.Step(m)
	switch {
	case err == nil || errors.Is(err, raft.ErrStepPeerNotFound):
	case errors.Is(err, raft.ErrProposalDropped) && m.GetType() == pb.MsgProp:
		c.refused.keep(m, c.tick)
	default:
		c.log.Debug("step", "type", m.GetType().String(), "err", err)
	}
}

// dropped counts a refused message and logs it, at most once per
// LogEveryTicks with the number of drops kept quiet since.
func (c *core) dropped(from, what string, err error) {
	c.drops.Add(1)
	if ok, quiet := c.dropLog.allow(c.tick, c.cfg.LogEveryTicks); ok {
		c.log.Warn("dropped message from peer", "from", from, "type", what, "err", err, "suppressed", quiet)
	}
}

// lostState handles a heartbeat from the leader that commits past our
// log. A leader commits on a follower only what that follower
// acknowledged as durable, so this member lost entries it promised to
// keep (a wiped data directory, a damaged log): it may also have lost its
// vote, and must not take part again (invariant 12 of ARCHITECTURE.md). Once
// the leader has said so for a whole election timeout (a real loss
// repeats with every heartbeat; one forged frame does not), the member
// stops, saying what to do.
func (c *core) lostState(from string, commit, last uint64) {
	l := &c.lost
	et := uint64(c.cfg.ElectionTicks)
	if l.seen == 0 || c.tick-l.last > 2*et {
		l.first, l.seen = c.tick, 0
	}
	l.last = c.tick
	l.seen++
	err := fmt.Errorf("%w: the leader (%s) committed up to index %d on this member, whose log ends at %d: "+
		"entries it acknowledged are gone (a wiped or damaged data directory); "+
		"remove it (RemoveMember) and add it again under a new name with an empty data directory",
		errs.StateLost, from, commit, last)
	if l.seen >= 3 && c.tick-l.first >= et {
		c.setFatal(err)
		return
	}
	if ok, quiet := l.log.allow(c.tick, c.cfg.LogEveryTicks); ok {
		c.log.Error("leader believes this member holds entries it does not", "err", err, "suppressed", quiet)
	}
}

// lossReports tracks the leader's reports that this member lost state
// (lostState), in ticks.
type lossReports struct {
	first, last uint64
	seen        int
	log         rateLimit
}

// rateLimit lets one event through per period of ticks (every; 0: all of
// them) and counts the rest.
type rateLimit struct {
	mu    sync.Mutex
	used  bool
	next  uint64
	quiet uint64
}

func (r *rateLimit) allow(tick, every uint64) (ok bool, quiet uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if every > 0 && r.used && tick < r.next {
		r.quiet++
		return false, 0
	}
	r.used, r.next = true, tick+every
	quiet, r.quiet = r.quiet, 0
	return true, quiet
}
