package coord_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/sessions"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// These tests play an outsider on the same network as a 3-member cell
// over TCP, sending hand-made frames as the wire format documents them
// (an attacker reads the source too). Each attack was seen to work
// before identity and validation existed: write keys, end a holder's
// session, keep an orphaned one alive, add ghost voters, panic a member.
// Now each must change nothing and kill nothing.

// tcpCell opens a 3-member cell over loopback TCP with in-memory storage.
func tcpCell(t *testing.T, mod func(*coord.Config)) ([]*coord.Node, []coord.Peer) {
	t.Helper()
	var peers []coord.Peer
	for i, addr := range loopbackAddrs(t, 3) {
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: addr})
	}
	nodes := make([]*coord.Node, 3)
	for i, p := range peers {
		cfg := coord.Config{
			Name: p.Name, Addr: p.Addr, Peers: peers,
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
		}
		if mod != nil {
			mod(&cfg)
		}
		n, err := coord.Open(context.Background(), cfg)
		require.NoError(t, err)
		nodes[i] = n
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A member with no leader for three election timeouts answers
	// ErrNoQuorum: on a loaded machine the first election over TLS can
	// take longer, so ask again until the cell has formed.
	var err error
	for {
		_, err = nodes[0].Put(ctx, "warmup", []byte("x"))
		if !errors.Is(err, coord.ErrNoQuorum) || ctx.Err() != nil {
			break
		}
	}
	require.NoError(t, err)
	return nodes, peers
}

// attacker speaks the wire format to one member's port.
type attacker struct {
	t    *testing.T
	conn net.Conn
	cell uint64
	inc  uint64
}

func dialAttacker(t *testing.T, addr string, cell uint64) *attacker {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &attacker{t: t, conn: c, cell: cell, inc: 0xbad}
}

// envelope builds a raftnode envelope: version 2, kind, cell, incarnation.
func (a *attacker) envelope(kind byte, body []byte) []byte {
	b := []byte{2, kind}
	b = binary.BigEndian.AppendUint64(b, a.cell)
	b = binary.BigEndian.AppendUint64(b, a.inc)
	return append(b, body...)
}

func (a *attacker) raft(m *pb.Message) []byte {
	body, err := proto.Marshal(m)
	require.NoError(a.t, err)
	return a.envelope(1, body)
}

func (a *attacker) app(channel byte, data []byte) []byte {
	return a.envelope(4, append([]byte{channel}, data...))
}

// send writes one frame: a 4-byte length, then msgpack [1, from, to, data].
// Errors are ignored: the member may cut the connection, as it should.
func (a *attacker) send(from, to string, data []byte) {
	var body bytes.Buffer
	enc := msgpack.NewEncoder(&body)
	require.NoError(a.t, enc.EncodeArrayLen(4))
	require.NoError(a.t, enc.EncodeUint8(1))
	require.NoError(a.t, enc.EncodeString(from))
	require.NoError(a.t, enc.EncodeString(to))
	require.NoError(a.t, enc.EncodeBytes(data))
	frame := binary.BigEndian.AppendUint32(nil, uint32(body.Len()))
	_ = a.conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, _ = a.conn.Write(append(frame, body.Bytes()...))
}

func prop(from, to uint64, cmds ...*command.Command) *pb.Message {
	m := &pb.Message{Type: pb.MsgProp.Enum(), From: new(from), To: new(to)}
	for _, c := range cmds {
		data, _ := command.Encode(c)
		m.Entries = append(m.Entries, &pb.Entry{Data: data})
	}
	return m
}

func TestOutsiderCannotSpeakForTheCell(t *testing.T) {
	t.Parallel()
	nodes, peers := tcpCell(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A holder whose session an outsider will try to end, and an orphan
	// (nobody keeps it alive) it will try to keep alive.
	holder, err := nodes[1].NewSession(ctx, coord.WithTTL(nodes[1].MinSessionTTL()))
	require.NoError(t, err)
	defer holder.Close(context.Background())
	_, err = nodes[1].Put(ctx, "held", []byte("by holder"), coord.Ephemeral(holder))
	require.NoError(t, err)
	orphan, err := nodes[2].NewSession(ctx, coord.WithTTL(nodes[2].MinSessionTTL()))
	require.NoError(t, err)
	orphan.Orphan()

	before, rev, err := nodes[0].List(ctx, "")
	require.NoError(t, err)
	membersBefore, err := nodes[0].Admin().Members(ctx)
	require.NoError(t, err)

	cell := coord.CellID("", peers)
	ids := map[string]uint64{}
	for _, p := range peers {
		ids[p.Name] = coord.IDFromName(p.Name)
	}
	ghost := func(name string) *command.Command {
		return &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{
			{Type: command.OpPut, Key: "owned/" + name, Value: []byte("by an outsider")}}}}
	}
	endHolder := &command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: int64(holder.ID()), Expired: true}}
	ka, err := sessions.Encode(&sessions.Message{KeepAlive: &sessions.KeepAlive{Seq: 1, IDs: []int64{int64(orphan.ID())}}})
	require.NoError(t, err)
	cc, err := proto.Marshal(&pb.ConfChange{Type: pb.ConfChangeAddNode.Enum(), NodeId: new(uint64(0x6057)), Context: []byte("ghost")})
	require.NoError(t, err)

	stop := make(chan struct{})
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		// Keep forging for longer than the orphan's TTL, so a forged
		// keep-alive that worked would keep it alive.
		for round := 0; ; round++ {
			for i, p := range peers {
				a := dialAttacker(t, p.Addr, cell)
				for _, from := range []string{"nobody", peers[(i+1)%3].Name} {
					fromID := coord.IDFromName(from)
					to := ids[p.Name]
					a.send(from, p.Name, a.raft(prop(fromID, to, ghost(from))))
					a.send(from, p.Name, a.raft(prop(fromID, to, endHolder)))
					a.send(from, p.Name, a.raft(&pb.Message{Type: pb.MsgProp.Enum(), From: new(fromID), To: new(to),
						Entries: []*pb.Entry{{Type: pb.EntryConfChange.Enum(), Data: cc}}}))
					a.send(from, p.Name, a.raft(&pb.Message{Type: pb.MsgProp.Enum(), From: new(fromID), To: new(to)}))
					a.send(from, p.Name, a.raft(&pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(fromID), To: new(to),
						Term: new(uint64(1 << 20)), Commit: new(uint64(1 << 40))}))
					a.send(from, p.Name, a.raft(&pb.Message{Type: pb.MsgApp.Enum(), From: new(fromID), To: new(to),
						Term: new(uint64(1 << 20)), Index: new(uint64(1 << 30)), Commit: new(uint64(1 << 40))}))
					a.send(from, p.Name, a.app('S', ka))
				}
				a.conn.Close()
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	// The orphan must end on schedule although forged keep-alives name it.
	select {
	case <-orphan.Done():
	case <-ctx.Done():
		t.Fatal("an orphaned session was kept alive by forged keep-alives")
	}
	close(stop)
	<-floodDone

	for i, n := range nodes {
		require.NoError(t, n.Err(), "member %d failed", i)
	}
	select {
	case <-holder.Done():
		t.Fatalf("the holder's session was ended: %v", holder.Err())
	default:
	}
	after, _, err := nodes[0].List(ctx, "")
	require.NoError(t, err)
	// The orphan owned no keys, so the key space is exactly as it was.
	require.Equal(t, keysOf(before), keysOf(after), "the key space changed (revision before: %d)", rev)
	membersAfter, err := nodes[0].Admin().Members(ctx)
	require.NoError(t, err)
	require.Equal(t, membersBefore, membersAfter)
	_, err = nodes[2].Put(ctx, "still", []byte("works"))
	require.NoError(t, err, "the cell still serves writes")
}

func keysOf(kvs []coord.KV) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key + "=" + string(kv.Value)
	}
	return out
}

func TestSecretKeepsStrangersOut(t *testing.T) {
	t.Parallel()
	secret := bytes.Repeat([]byte{7}, 32)
	nodes, peers := tcpCell(t, func(c *coord.Config) { c.Secret = secret })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cell := coord.CellID("", peers)
	// Plaintext frames at a member that wants TLS are not even a handshake.
	a := dialAttacker(t, peers[0].Addr, cell)
	a.send(peers[1].Name, peers[0].Name, a.raft(prop(coord.IDFromName(peers[1].Name), coord.IDFromName(peers[0].Name),
		&command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{{Type: command.OpPut, Key: "x", Value: []byte("y")}}}})))
	_, err := nodes[1].Put(ctx, "after", []byte("ok"))
	require.NoError(t, err)
	_, err = nodes[0].Get(ctx, "x")
	require.ErrorIs(t, err, coord.ErrNotFound)
}
