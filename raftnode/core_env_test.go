package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// coreEnv drives several cores tick by tick over an in-test network, as
// the raft loop would drive one, with no goroutine and no clock of its
// own (the stores are in memory): what a transcript in testdata shows is
// the same every run. It is the test's driver: it persists, sends,
// applies and delivers exactly what each Ready says, and writes down the
// answers, leader changes, resends and refusals it sees.
type coreEnv struct {
	t       testing.TB
	members []*coreMember
	// wire holds the envelopes sent and not yet delivered, in order.
	wire []transport.Envelope
	// cut holds the one-way links that drop everything ("from>to"), and
	// drop how many more envelopes a link drops.
	cut  map[string]bool
	drop map[string]int
	// calls are the callers' requests, by the name the transcript gives
	// them (p1, r1, c1).
	calls  map[string]*call
	ncalls int
	// down holds the connections a member's transport reports closed
	// ("m2>m1": m2's connection with m1), for failover.go.
	down    map[string]bool
	verbose bool
	out     *strings.Builder
}

type coreMember struct {
	name     string
	c        *core
	store    *storage.Store
	counters *counters
	logs     *logRecorder
	stopped  error
	resent   uint64 // counters.resent as last reported
	drops    uint64 // c.drops as last reported
}

// call is one caller: a proposal, a read or a membership change.
type call struct {
	name string
	m    *coreMember
	p    *proposal
	r    *readRequest
	w    *confWaiter
	what string
	done bool
}

const (
	envElection  = 10
	envHeartbeat = 1
)

func newCoreEnv(t testing.TB) *coreEnv {
	return &coreEnv{t: t, cut: map[string]bool{}, drop: map[string]int{}, calls: map[string]*call{}, down: map[string]bool{}}
}

// addMembers founds a cell of n voters m1..mn with Raft IDs 1..n. With
// addrs, each has the transport address addr-mI in the book.
func (e *coreEnv) addMembers(n int, addrs bool) {
	cs := &pb.ConfState{}
	var book []storage.MemberInfo
	for i := range n {
		id := uint64(i + 1)
		cs.Voters = append(cs.Voters, id)
		info := storage.MemberInfo{ID: id, Name: fmt.Sprintf("m%d", id)}
		if addrs {
			info.Addr = "addr-" + info.Name
		}
		book = append(book, info)
	}
	for _, info := range book {
		st, err := storage.Open(storage.Options{})
		require.NoError(e.t, err)
		e.t.Cleanup(func() { st.Close() })
		require.NoError(e.t, st.Bootstrap(cs, book))
		e.startMember(st, info, testCellID, book)
	}
}

// startMember starts a core for member info on store st, whose book
// holds book; cell 0 for a joining member.
func (e *coreEnv) startMember(st *storage.Store, info storage.MemberInfo, cell uint64, book []storage.MemberInfo) *coreMember {
	ident, err := st.SaveIdentity(storage.Identity{CellID: cell, Name: info.Name, Incarnation: 100 + info.ID})
	require.NoError(e.t, err)
	m := &coreMember{name: info.Name, store: st, counters: &counters{}, logs: &logRecorder{}}
	c, err := newCore(coreConfig{
		ID: info.ID, Name: info.Name, Identity: ident,
		ElectionTicks: envElection, HeartbeatTicks: envHeartbeat,
		Logger: slog.New(m.logs), Log: st.RaftLog(), Store: st, State: st.StateMachine(),
		Seed: info.ID - 1, Counters: m.counters, IDOf: envIDOf,
		Connected: func(peer string) bool { return !e.down[info.Name+">"+peer] },
		Raft: raft.Config{
			Applied: st.StateMachine().AppliedIndex(), MaxSizePerMsg: 1 << 20,
			MaxInflightMsgs: 256, MaxUncommittedEntriesSize: 1 << 30,
			CheckQuorum: true, PreVote: true, ReadOnlyOption: raft.ReadOnlySafe, StepDownOnRemoval: true,
		},
	})
	require.NoError(e.t, err)
	c.book.set(slices.Values(book))
	m.c = c
	e.members = append(e.members, m)
	return m
}

// joinMember starts member name (Raft ID from envIDOf) on an empty store,
// knowing the members of via's book, as a member told to join does.
func (e *coreEnv) joinMember(name string, via *coreMember) *coreMember {
	st, err := storage.Open(storage.Options{})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { st.Close() })
	ms, err := via.store.StateMachine().Members()
	require.NoError(e.t, err)
	info := storage.MemberInfo{ID: envIDOf(name), Name: name}
	if len(ms) > 0 && ms[0].Addr != "" {
		info.Addr = "addr-" + name
	}
	return e.startMember(st, info, 0, append(ms, info))
}

// envIDOf is the env's IDFromName: mI has Raft ID I, so transcripts read
// plainly; any other name gets IDFromName's.
func envIDOf(name string) uint64 {
	if id, err := strconv.ParseUint(strings.TrimPrefix(name, "m"), 10, 64); err == nil && strings.HasPrefix(name, "m") && id > 0 {
		return id
	}
	return IDFromName(name)
}

func (e *coreEnv) member(name string) *coreMember {
	e.t.Helper()
	for _, m := range e.members {
		if m.name == name {
			return m
		}
	}
	e.t.Fatalf("no member %q", name)
	return nil
}

func (e *coreEnv) printf(format string, args ...any) { fmt.Fprintf(e.out, format+"\n", args...) }

// settle carries out every member's Ready and delivers what is on the
// wire until nothing moves, noting what happens.
func (e *coreEnv) settle() {
	for range 1000 {
		moved := false
		for _, m := range e.members {
			if e.process(m) {
				moved = true
			}
		}
		if len(e.wire) > 0 {
			moved = true
			wire := e.wire
			e.wire = nil
			for _, env := range wire {
				e.deliver(env)
			}
		}
		if !moved {
			e.report()
			return
		}
	}
	e.t.Fatal("the cell does not settle")
}

// deliver hands env to its member unless its link drops it.
func (e *coreEnv) deliver(env transport.Envelope) {
	link := env.From + ">" + env.To
	if e.cut[link] {
		e.note(env, "cut")
		return
	}
	if e.drop[link] > 0 {
		e.drop[link]--
		e.note(env, "dropped")
		return
	}
	to := e.find(env.To)
	if to == nil || to.stopped != nil {
		return
	}
	e.note(env, "")
	to.c.Step(env)
}

func (e *coreEnv) find(name string) *coreMember {
	for _, m := range e.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// note writes down a Raft message on the wire (verbose only), and what
// the network did to it.
func (e *coreEnv) note(env transport.Envelope, fate string) {
	if !e.verbose && fate == "" {
		return
	}
	d, err := decodeEnvelope(env.Data)
	what := "?"
	switch {
	case err != nil:
		what = err.Error()
	case d.raft != nil:
		what = raft.DescribeMessage(d.raft, describeEntry)
	default:
		what = kindNames[d.kind]
	}
	if d.raft != nil && !e.verbose && d.raft.GetType() != pb.MsgProp {
		// Only forwarded proposals' fates matter to the bookkeeping; the
		// rest is Raft's business.
		return
	}
	if fate != "" {
		fate += ": "
	}
	e.printf("  %s>%s %s%s", env.From, env.To, fate, what)
}

var kindNames = map[wireKind]string{
	kindChunk: "snapshot chunk", kindChunkAck: "snapshot chunk ack", kindApp: "application message",
	kindReject: "reject (another data directory)", kindProbe: "probe", kindRemoved: "removal notice",
	kindPeerAddr: "peer address",
}

func describeEntry(data []byte) string {
	cmd, err := command.Decode(data)
	if err != nil {
		return fmt.Sprintf("%d bytes", len(data))
	}
	if cmd.Txn != nil && len(cmd.Txn.Then) == 1 {
		return "put " + cmd.Txn.Then[0].Key
	}
	return fmt.Sprintf("kind %d", cmd.Kind)
}

// process carries out member m's Readies as the raft loop would, and
// reports whether there were any.
func (e *coreEnv) process(m *coreMember) bool {
	if m.stopped != nil {
		return false
	}
	any := false
	for m.c.HasReady() {
		any = true
		rd := m.c.Ready()
		e.answer(m, rd.Answers)
		if rd.Fatal != nil {
			m.stopped = rd.Fatal
			e.printf("%s stops: %v", m.name, rd.Fatal)
			return true
		}
		if rd.LeaderChanged {
			lead := "none"
			if rd.Lead != 0 {
				lead = fmt.Sprintf("m%d", rd.Lead)
			}
			e.printf("%s: leader %s, term %d", m.name, lead, rd.Term)
		}
		for _, a := range rd.Apps {
			e.printf("%s: application message from %s: %q", m.name, a.from, a.data)
		}
		for _, pc := range rd.Peers {
			if pc.remove {
				e.printf("%s: forgets the address of %s", m.name, pc.name)
			} else {
				e.printf("%s: answers %s at %s", m.name, pc.name, pc.addr)
			}
		}
		e.wire = append(e.wire, rd.Envelopes...)
		if rd.HasRaft {
			if rd.Leader {
				e.sendRaft(m, rd)
			}
			if rd.Snapshot != nil {
				require.NoError(e.t, m.store.InstallSnapshot(rd.Snapshot))
				e.printf("%s: installed a snapshot at index %d", m.name, rd.Snapshot.GetMetadata().GetIndex())
				e.reloadBook(m)
				e.answer(m, m.c.SnapshotInstalled())
			}
			if rd.HardState != nil || len(rd.Entries) > 0 {
				require.NoError(e.t, m.store.Append(rd.HardState, rd.Entries, rd.MustSync))
			}
			if !rd.Leader {
				e.sendRaft(m, rd)
			}
			if len(rd.CommittedEntries) > 0 {
				out, err := m.store.StateMachine().Apply(rd.CommittedEntries, rd.ConfState)
				require.NoError(e.t, err)
				var as []answer
				if out.MembersChanged {
					e.reloadBook(m)
					as = m.c.ConfApplied(rd.CommittedEntries, as)
				}
				e.answer(m, m.c.Applied(out.Results, as))
				if removed, _ := m.store.StateMachine().WasRemoved(m.c.id); removed {
					m.stopped = errors.New("removed")
					e.printf("%s stops: its removal applied", m.name)
					m.c.Advance(rd)
					return true
				}
			}
		}
		m.c.Advance(rd)
	}
	return any
}

func (e *coreEnv) sendRaft(m *coreMember, rd Ready) {
	e.wire = append(e.wire, rd.Messages...)
	for _, s := range rd.Snaps {
		e.streamSnapshot(m, s)
	}
}

// streamSnapshot does what snapshot.go does over the wire, directly: the
// state staged on the follower, then the MsgSnap sent.
func (e *coreEnv) streamSnapshot(m *coreMember, s snapSend) {
	to := e.find(s.to)
	md := s.m.GetSnapshot().GetMetadata()
	status := raft.SnapshotFailure
	if to != nil && !e.cut[m.name+">"+s.to] {
		r, ok := m.store.StateMachine().OpenSnapshot(md.GetIndex())
		require.True(e.t, ok)
		cur, err := r.Next()
		require.NoError(e.t, err)
		for seq := 0; ; seq++ {
			next, err := r.Next()
			last := errors.Is(err, io.EOF)
			require.NoError(e.t, to.store.StateMachine().StageChunk(md.GetIndex(), md.GetTerm(), seq, cur, last))
			if last {
				break
			}
			cur = next
		}
		require.NoError(e.t, r.Close())
		data, err := m.c.hdr().encodeRaft(s.m)
		require.NoError(e.t, err)
		e.wire = append(e.wire, transport.Envelope{From: m.name, To: s.to, Data: data})
		status = raft.SnapshotFinish
		e.printf("%s: streamed a snapshot at index %d to %s", m.name, md.GetIndex(), s.to)
	}
	m.c.ReportSnapshot(s.m.GetTo(), status)
}

// reloadBook does what Node.reloadMembers does, without a transport.
func (e *coreEnv) reloadBook(m *coreMember) {
	ms, err := m.store.StateMachine().Members()
	require.NoError(e.t, err)
	keep := map[uint64]bool{}
	for _, info := range ms {
		keep[info.ID] = true
	}
	gone := m.c.book.keepOnly(keep, m.name)
	m.c.book.set(slices.Values(ms))
	m.c.strangers.forget(func(name string) bool { _, ok := m.c.book.id(name); return ok })
	m.c.rememberRemoved(gone, func(name string) bool { _, ok := m.c.book.id(name); return ok })
}

// answer delivers answers and writes them down by the caller's name.
func (e *coreEnv) answer(m *coreMember, as []answer) {
	for i := range as {
		a := &as[i]
		cl := e.callOf(a)
		if cl == nil {
			e.t.Fatalf("%s: an answer for a caller the test did not make", m.name)
		}
		if cl.done {
			e.t.Fatalf("%s: %s answered twice", m.name, cl.name)
		}
		cl.done = true
		a.deliver()
		e.printf("%s: %s %s -> %s", m.name, cl.name, cl.what, describeAnswer(a))
	}
}

func (e *coreEnv) callOf(a *answer) *call {
	for _, cl := range e.calls {
		if (a.prop != nil && cl.p == a.prop) || (a.read != nil && cl.r == a.read) || (a.conf != nil && cl.w == a.conf) {
			return cl
		}
	}
	return nil
}

func describeAnswer(a *answer) string {
	switch {
	case a.err != nil:
		return "error: " + a.err.Error()
	case a.read != nil:
		return fmt.Sprintf("read index %d", a.index)
	case a.conf != nil:
		return "applied"
	}
	s := fmt.Sprintf("ok, revision %d", a.res.Rev)
	if a.res.Status != command.StatusOK {
		s = fmt.Sprintf("status %d", a.res.Status)
	}
	if a.res.Repeat {
		s += " (a repeat)"
	}
	return s
}

// report writes down the resends and refusals each member counted since
// the last report, with the reasons it logged.
func (e *coreEnv) report() {
	for _, m := range e.members {
		if r := m.counters.resent.Load(); r != m.resent {
			e.printf("%s: handed %d command(s) to Raft again", m.name, r-m.resent)
			m.resent = r
		}
		if d := m.c.drops.Load(); d != m.drops {
			e.printf("%s: refused %d message(s)", m.name, d-m.drops)
			m.drops = d
		}
		for _, l := range m.logs.take() {
			e.printf("%s: log: %s", m.name, l)
		}
	}
}

// newCall registers a caller under the next name with prefix.
func (e *coreEnv) newCall(prefix string, m *coreMember, what string) *call {
	e.ncalls++
	cl := &call{name: fmt.Sprintf("%s%d", prefix, e.ncalls), m: m, what: what}
	e.calls[cl.name] = cl
	return cl
}

// propose does what Node.Propose does up to the raft loop.
func (e *coreEnv) propose(m *coreMember, key, value string) *call {
	cmd := putCmd(key, value)
	p := m.c.waiters.stamp(cmd, m.store.StateMachine().AppliedIndex())
	data, err := command.Encode(cmd)
	require.NoError(e.t, err)
	p.data = data
	m.c.waiters.add(p)
	cl := e.newCall("p", m, "put "+key)
	cl.p = p
	m.c.Propose(p)
	return cl
}

// giveUp does what Node.abandon does when the caller's context ends.
func (e *coreEnv) giveUp(cl *call) {
	switch {
	case cl.p != nil:
		waiting, handed := cl.m.c.waiters.giveUp(cl.p)
		switch {
		case !waiting:
			e.printf("%s: already answered", cl.name)
		case handed:
			cl.done = true
			err := &AmbiguousError{Proposer: cl.p.prop, Err: context.Canceled}
			e.printf("%s: %s -> error: %v (proposer seq %d)", cl.m.name, cl.name, err, cl.p.prop.Seq)
		default:
			cl.done = true
			e.printf("%s: %s -> error: never handed to Raft (ErrNoQuorum)", cl.m.name, cl.name)
		}
	case cl.w != nil && cl.done:
		e.printf("%s: already answered", cl.name)
	case cl.w != nil:
		cl.m.c.confs.remove(cl.w.req)
		cl.done = true
		e.printf("%s: %s -> gave up (ErrAmbiguous)", cl.m.name, cl.name)
	default:
		e.t.Fatalf("%s cannot give up", cl.name)
	}
}

// logRecorder keeps the warnings and errors a core logs.
type logRecorder struct {
	lines []string
}

func (l *logRecorder) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" || a.Key == "type" || a.Key == "member" {
			fmt.Fprintf(&b, "; %s=%v", a.Key, a.Value)
		}
		return true
	})
	l.lines = append(l.lines, b.String())
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) take() []string {
	out := l.lines
	l.lines = nil
	return out
}
