package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// wireFuzzer feeds frames into a live 3-member cell. The oracle: no
// member stops (a panic would fail it, see stepFromWire and guard), and
// the replicated data stays what it was.
//
// A member that lies within the protocol is another matter: a well-formed
// append, snapshot or heartbeat at a newer term, or a well-formed command,
// from an authenticated member is what Raft trusts members to send, and
// no check can tell it from the truth. Those are counted, not delivered.
type wireFuzzer struct {
	c       *testCell
	want    map[string]string
	trusted int // well-formed leader messages or commands from members, not delivered
}

func newWireFuzzer(t testing.TB) *wireFuzzer {
	c := newTestCell(t, 3, nil)
	c.put(c.leader(), "a", "1")
	c.put(c.leader(), "b", "2")
	return &wireFuzzer{c: c, want: c.converged()}
}

// frame delivers body as kind from sender (0-2 a member, 3 a stranger) to
// member to.
func (f *wireFuzzer) frame(to, sender int, kind wireKind, body []byte) {
	name, h := "intruder", header{cell: testCellID, incarnation: 99}
	if sender < 3 {
		name, h = f.c.names[sender], f.c.header(sender)
	}
	if kind == kindRaft && sender < 3 {
		m := &pb.Message{}
		if proto.Unmarshal(body, m) == nil && f.trustedLie(to, name, m) {
			f.trusted++
			return
		}
	}
	data := h.put(nil, kind)
	f.c.deliver(to, transport.Envelope{From: name, Data: append(data, body...)})
}

// trustedLie reports whether m passes every check yet could change what
// member to holds, were its sender lying (see wireFuzzer).
func (f *wireFuzzer) trustedLie(to int, from string, m *pb.Message) bool {
	n := f.c.nodes[to]
	if err := checkRaft(n, from, m); err != nil {
		// The leader's word that this member lost its log: it halts the
		// member once repeated for an election timeout, as it must when
		// true (CI's seed 1796186768087048004 repeated it three times).
		return errors.Is(err, errDropCommit)
	}
	switch m.GetType() {
	case pb.MsgApp, pb.MsgSnap, pb.MsgHeartbeat:
		return true
	case pb.MsgProp:
		for _, e := range m.GetEntries() {
			if e.GetType() != pb.EntryNormal {
				return true
			}
			if _, err := command.Decode(e.GetData()); err == nil {
				return true
			}
		}
	}
	return false
}

func (f *wireFuzzer) check(t testing.TB, what string) {
	for i, n := range f.c.nodes {
		if err := n.Err(); err != nil {
			t.Fatalf("%s: member %d failed: %v", what, i, err)
		}
		data, err := f.c.dataOf(i)
		if err != nil {
			t.Fatalf("%s: member %d: %v", what, i, err)
		}
		for k := range data {
			if _, ok := f.want[k]; !ok {
				t.Fatalf("%s: member %d gained key %q", what, i, k)
			}
		}
	}
}

// randomMessage builds a message around a valid one from member from to
// member to, with fields drawn from values near the edges of what Raft
// accepts: the shapes that used to panic it, and their neighbours.
func (f *wireFuzzer) randomMessage(rng *rand.Rand, to, from int) *pb.Message {
	st := f.c.nodes[to].Status()
	pick := func(vs ...uint64) uint64 { return vs[rng.IntN(len(vs))] }
	idOf := func(i int) uint64 { return f.c.nodes[i].id }
	term, last := st.Term, st.LastIndex
	m := &pb.Message{
		Type:    pb.MessageType(rng.IntN(27)).Enum(),
		From:    new(pick(idOf(from), idOf(from), idOf(from), idOf(to), 0, rng.Uint64())),
		To:      new(pick(idOf(to), idOf(to), idOf(to), idOf(from), 0)),
		Term:    new(pick(0, term-1, term, term, term+1, 1<<40, rng.Uint64())),
		LogTerm: new(pick(0, term-1, term, term+1, 1<<40)),
		Index:   new(pick(0, 1, last-1, last, last+1, 1<<40, ^uint64(0))),
		Commit:  new(pick(0, last, last+1, 1<<40, ^uint64(0))),
		Reject:  new(rng.IntN(2) == 0),
	}
	if rng.IntN(2) == 0 {
		m.RejectHint = new(pick(0, last, 1<<40))
	}
	for range rng.IntN(4) {
		e := &pb.Entry{Type: pb.EntryType(rng.IntN(4)).Enum()}
		if rng.IntN(2) == 0 {
			e.Index, e.Term = new(m.GetIndex()+1+uint64(len(m.Entries))), new(m.GetTerm())
		}
		switch rng.IntN(5) {
		case 0:
		case 1:
			e.Data = []byte{byte(rng.IntN(5)), byte(rng.Uint32())}
		case 2:
			cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeType(rng.IntN(5)).Enum(), NodeId: new(pick(0, idOf(0), idOf(1), idOf(2), 77))}}}
			if rng.IntN(3) == 0 {
				cc.Transition = pb.ConfChangeTransition(rng.IntN(4)).Enum()
				cc.Changes = append(cc.Changes, cc.Changes...)
			}
			e.Data, _ = proto.Marshal(cc)
		case 3:
			e.Data = []byte{0xff, 0x01, 0x02}
		case 4:
			e.Data, _ = command.Encode(putCmd("intruded", "x"))
		}
		m.Entries = append(m.Entries, e)
	}
	if rng.IntN(3) == 0 {
		voters := []uint64{idOf(0), idOf(1), idOf(2)}
		cs := &pb.ConfState{}
		switch rng.IntN(5) {
		case 0:
		case 1:
			cs.Voters = voters
		case 2:
			cs.Voters, cs.Learners = voters, voters[:1]
		case 3:
			cs.Voters, cs.VotersOutgoing, cs.AutoLeave = voters, voters[1:], new(rng.IntN(2) == 0)
		case 4:
			cs.Voters = []uint64{0, voters[0], voters[0]}
		}
		m.Snapshot = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
			Index: new(pick(0, 1, last, last+1, 1<<40)), Term: new(pick(0, 1, term, term+1)), ConfState: cs}}
	}
	return m
}

// randomChunk is a chunk or an ack body, mostly naming a real member.
func (f *wireFuzzer) randomChunk(rng *rand.Rand, from int) []byte {
	var b []byte
	fromID := rng.Uint64()
	if from < 3 && rng.IntN(4) != 0 {
		fromID = f.c.nodes[from].id
	}
	term := f.c.nodes[0].Status().Term
	for _, v := range []uint64{fromID, uint64(rng.IntN(3)) * 1 << uint(rng.IntN(40)), term + uint64(rng.IntN(3)) - 1, uint64(rng.IntN(4)), uint64(rng.IntN(2))} {
		b = binary.AppendUvarint(b, v)
	}
	return append(b, make([]byte, rng.IntN(64))...)
}

// A few hundred structured frames, seeded: members and strangers sending
// messages of every type with terms, indexes, commits, entries and conf
// states near and past what Raft accepts.
func TestStepFromWireRandom(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WIRE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with WIRE_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	f := newWireFuzzer(t)
	const cases = 400
	for i := range cases {
		to, from := rng.IntN(3), rng.IntN(4)
		if from == to {
			from = 3
		}
		sender := from
		if from == 3 {
			sender = rng.IntN(3) // a stranger claims to be a member in the message
		}
		switch k := rng.IntN(10); {
		case k < 8:
			body, err := proto.Marshal(f.randomMessage(rng, to, sender))
			require.NoError(t, err)
			f.frame(to, from, kindRaft, body)
		case k == 8:
			f.frame(to, from, kindChunk, f.randomChunk(rng, sender))
		default:
			f.frame(to, from, kindChunkAck, f.randomChunk(rng, sender))
		}
		f.check(t, fmt.Sprintf("case %d (seed %d)", i, seed))
	}
	t.Logf("%d of %d were well-formed leader messages or commands from members, not delivered", f.trusted, cases)
	// The cell still works and every member holds the same data.
	f.c.put(f.c.leader(), "after", "x")
	f.want["after"] = "x"
	require.Equal(t, f.want, f.c.converged(), "seed %d", seed)
	f.c.requireRunning()
}

// FuzzStepFromWire decodes arbitrary bytes as a frame's body and feeds
// it to a live cell: sel picks the receiving member, the sender (a member,
// or a stranger) and the kind (raft message, snapshot chunk, chunk ack).
func FuzzStepFromWire(f *testing.F) {
	wf := newWireFuzzer(f)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 64 {
		to := rng.IntN(3)
		from := (to + 1 + rng.IntN(2)) % 3
		body, err := proto.Marshal(wf.randomMessage(rng, to, from))
		require.NoError(f, err)
		f.Add(byte(to+3*from), body)
	}
	f.Add(byte(1+3*0+9), wf.randomChunk(rng, 0))
	f.Add(byte(1+3*0+18), wf.randomChunk(rng, 0))
	f.Fuzz(func(t *testing.T, sel byte, body []byte) {
		to, from, kind := int(sel%3), int(sel/3%4), wireKind(1+sel/12%3)
		if from == to {
			from = 3
		}
		wf.frame(to, from, kind, body)
		wf.check(t, fmt.Sprintf("frame %d %x", sel, body))
	})
}
