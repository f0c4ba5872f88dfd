package raftnode

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestCoreTranscripts runs the core's transcripts (testdata/*.txt): cores
// driven tick by tick by coreEnv, each command's output what the cell did
// (answers, leader changes, resends, refusals). Run with -rewrite to
// write the outputs anew, then read the diff: it is the change in
// behaviour.
//
// Commands:
//
//	add-members n=N [addrs]     found a cell m1..mN (Raft IDs 1..N), with
//	                            transport addresses addr-mI in the book
//	join mI via=mJ              start mI on an empty store, knowing mJ's
//	                            book (before conf-change add=mI)
//	transfer mI to=mJ           mI, leading, hands leadership to mJ
//	campaign mI [verbose]       mI campaigns (a pre-vote first)
//	forget-leader mI...         each forgets its leader (as after a lease)
//	tick [mI...] [n=K] [whole]  K ticks of the members (default all), each
//	                            followed by settle; output by tick, or
//	                            as a whole (when the tick is Raft's
//	                            random choice)
//	settle [verbose]            deliver and carry out until quiet
//	propose mI key=value        a caller's put on mI: call pN
//	read mI                     a caller's read-index on mI: call rN
//	conf-change mI update=mJ    a membership change on mI: call cN
//	conf-change mI remove=mJ    (or a removal, or add=mJ: an addition)
//	peer-down mI mJ             mI's transport reports mJ's connection
//	                            closed by mJ, and not back
//	reconnect mI mJ             until this
//	give-up pN|cN               the caller's context ends
//	cut mI>mJ...                those links drop everything
//	isolate mI [out]            every link from (and, without out, to) mI
//	heal                        no link drops any more
//	drop mI>mJ n=K              the link drops its next K envelopes
//	compact mI                  mI compacts its log up to its applied index
//	send to=mI from=mJ ...      a hand-made frame (see sendFrame)
//	get mI key                  the key's value and version on mI
//	status                      every member's view
func TestCoreTranscripts(t *testing.T) {
	t.Parallel()
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			return
		}
		e := newCoreEnv(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			e.t = t
			var b strings.Builder
			e.out = &b
			e.run(d)
			if b.Len() == 0 {
				return "ok\n"
			}
			return b.String()
		})
	})
}

func (e *coreEnv) run(d *datadriven.TestData) {
	t := e.t
	names := func() []*coreMember {
		var ms []*coreMember
		for _, a := range d.CmdArgs {
			if len(a.Vals) == 0 && strings.HasPrefix(a.Key, "m") {
				ms = append(ms, e.member(a.Key))
			}
		}
		return ms
	}
	first := func() *coreMember {
		ms := names()
		require.NotEmpty(t, ms, "%s: name a member", d.Cmd)
		return ms[0]
	}
	switch d.Cmd {
	case "add-members":
		var n int
		d.ScanArgs(t, "n", &n)
		e.addMembers(n, d.HasArg("addrs"))
	case "join":
		var via string
		d.ScanArgs(t, "via", &via)
		e.joinMember(d.CmdArgs[0].Key, e.member(via))
	case "transfer":
		var to string
		d.ScanArgs(t, "to", &to)
		require.True(t, first().c.transferTo(envIDOf(to)), "%s does not lead", first().name)
		e.settle()
	case "campaign":
		require.NoError(t, first().c.rn.Campaign())
		e.verbose = d.HasArg("verbose")
		e.settle()
		e.verbose = false
	case "forget-leader":
		for _, m := range names() {
			m.c.rn.ForgetLeader()
		}
		e.settle()
	case "tick":
		k := 1
		d.MaybeScanArgs(t, "n", &k)
		whole := d.HasArg("whole")
		ms := names()
		if len(ms) == 0 {
			ms = e.members
		}
		out := e.out
		for i := range k {
			var b strings.Builder
			e.out = &b
			for _, m := range ms {
				if m.stopped == nil {
					m.c.Tick()
					m.c.Flush()
				}
			}
			e.settle()
			if b.Len() > 0 {
				if !whole {
					fmt.Fprintf(out, "tick %d:\n", i+1)
				}
				out.WriteString(b.String())
			}
		}
		e.out = out
	case "settle":
		e.verbose = d.HasArg("verbose")
		e.settle()
		e.verbose = false
	case "propose":
		m := first()
		for _, a := range d.CmdArgs[1:] {
			cl := e.propose(m, a.Key, a.Vals[0])
			e.printf("%s: %s put %s", m.name, cl.name, a.Key)
		}
		m.c.Flush()
		e.settle()
	case "read":
		m := first()
		cl := e.newCall("r", m, "read")
		cl.r = &readRequest{resc: make(chan readResult, 1)}
		m.c.Read(cl.r)
		m.c.Flush()
		e.printf("%s: %s read", m.name, cl.name)
		e.settle()
	case "conf-change":
		m := first()
		var target string
		typ, verb := pb.ConfChangeUpdateNode, "update"
		switch {
		case d.MaybeScanArgs(t, "update", &target):
		case d.MaybeScanArgs(t, "add", &target):
			typ, verb = pb.ConfChangeAddNode, "add"
		default:
			d.ScanArgs(t, "remove", &target)
			typ, verb = pb.ConfChangeRemoveNode, "remove"
		}
		id, ok := m.c.book.id(target)
		addr := ""
		if typ == pb.ConfChangeAddNode {
			id, ok = envIDOf(target), true
			if j := e.find(target); j != nil {
				addr = j.c.book.addr(id)
			}
		}
		require.True(t, ok)
		req := m.c.waiters.newID()
		ctx, err := command.EncodeMember(&command.Member{Name: target, Addr: addr, Req: req})
		require.NoError(t, err)
		cl := e.newCall("c", m, verb+" "+target)
		cl.w = &confWaiter{req: req, done: make(chan struct{}), cc: &pb.ConfChangeV2{
			Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(id)}},
			Context: ctx,
		}}
		m.c.confs.add(cl.w)
		m.c.ProposeConfChange(cl.w)
		e.printf("%s: %s %s", m.name, cl.name, cl.what)
		e.settle()
	case "give-up":
		cl := e.calls[d.CmdArgs[0].Key]
		require.NotNil(t, cl, "no call %s", d.CmdArgs[0].Key)
		e.giveUp(cl)
		e.settle()
	case "cut":
		for _, a := range d.CmdArgs {
			e.cut[a.Key] = true
		}
	case "isolate":
		m := first()
		for _, o := range e.members {
			if o != m {
				e.cut[m.name+">"+o.name] = true
				if !d.HasArg("out") {
					e.cut[o.name+">"+m.name] = true
				}
			}
		}
	case "peer-down":
		// The transport of the first member reports its connection with
		// the second closed by the peer's side, and not back.
		ms := names()
		require.Len(t, ms, 2)
		e.down[ms[0].name+">"+ms[1].name] = true
		ms[0].c.PeerDown(ms[1].name)
		e.settle()
	case "reconnect":
		ms := names()
		require.Len(t, ms, 2)
		delete(e.down, ms[0].name+">"+ms[1].name)
	case "heal":
		clear(e.cut)
		clear(e.drop)
	case "drop":
		var k int
		d.ScanArgs(t, "n", &k)
		e.drop[d.CmdArgs[0].Key] += k
	case "compact":
		m := first()
		applied := m.store.StateMachine().AppliedIndex()
		require.NoError(t, m.store.Sync())
		require.NoError(t, m.store.RaftLog().Compact(applied))
		e.printf("%s: log compacted up to %d", m.name, applied)
	case "send":
		e.sendFrame(d)
		e.settle()
	case "get":
		m := first()
		key := d.CmdArgs[1].Key
		kv, ok, err := m.store.StateMachine().Get(key)
		require.NoError(t, err)
		if !ok {
			e.printf("%s: %s absent", m.name, key)
		} else {
			e.printf("%s: %s = %q, version %d", m.name, key, kv.Value, kv.Version)
		}
	case "status":
		for _, m := range e.members {
			if m.stopped != nil {
				e.printf("%s: stopped", m.name)
				continue
			}
			st := m.c.status.Load()
			lead := "none"
			if st.Leader != 0 {
				lead = fmt.Sprintf("m%d", st.Leader)
			}
			e.printf("%s: %s, leader %s, term %d, commit %d, applied %d, tick %d",
				m.name, st.Role, lead, st.Term, st.Commit, m.store.StateMachine().AppliedIndex(), m.c.tick)
		}
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
}

// sendFrame delivers a hand-made frame to member to, as member from (or
// any name) would send it over an authenticated connection. Arguments:
// to, from; the header's version, kind, cell and inc (default: from's
// own); for a Raft message its type, term, commit, index, logterm, and
// msgfrom and msgto (Raft IDs; default from's and to's), and entries=K
// normal entries of data=K bytes (default 0), each byte format=F (default
// the command format this package writes).
func (e *coreEnv) sendFrame(d *datadriven.TestData) {
	t := e.t
	var toName, from string
	d.ScanArgs(t, "to", &toName)
	d.ScanArgs(t, "from", &from)
	to := e.member(toName)
	h := header{cell: testCellID}
	var msgFrom uint64
	if m := e.find(from); m != nil {
		h.incarnation = m.c.ident.self
		msgFrom = m.c.id
	} else {
		h.incarnation = 999
		msgFrom = 99
	}
	u := func(key string, v *uint64) {
		if a, ok := d.Arg(key); ok {
			x, err := strconv.ParseUint(a.Vals[0], 0, 64)
			require.NoError(t, err)
			*v = x
		}
	}
	u("cell", &h.cell)
	u("inc", &h.incarnation)
	u("msgfrom", &msgFrom)
	msgTo := to.c.id
	u("msgto", &msgTo)
	kind, version := uint64(kindRaft), uint64(wireVersion)
	u("kind", &kind)
	u("version", &version)
	var term, commit, index, logTerm, ents, size uint64
	format := uint64(command.Version)
	u("format", &format)
	u("term", &term)
	u("commit", &commit)
	u("index", &index)
	u("logterm", &logTerm)
	u("entries", &ents)
	u("data", &size)
	var body []byte
	if kind == uint64(kindRaft) {
		var typ string
		d.ScanArgs(t, "type", &typ)
		v, ok := pb.MessageType_value[typ]
		require.True(t, ok, "no message type %s", typ)
		m := &pb.Message{Type: pb.MessageType(v).Enum(), From: new(msgFrom), To: new(msgTo), Term: new(term),
			Commit: new(commit), Index: new(index), LogTerm: new(logTerm)}
		for range ents {
			m.Entries = append(m.Entries, &pb.Entry{Data: slices.Repeat([]byte{byte(format)}, int(size))})
		}
		data, err := h.encodeRaft(m)
		require.NoError(t, err)
		body = data[headerLen:]
	}
	frame := h.put(nil, wireKind(kind))
	frame[0] = byte(version)
	e.printf("%s gets a frame from %s", to.name, from)
	to.c.Step(transport.Envelope{From: from, To: to.name, Data: append(frame, body...)})
}
