package raftnode

import (
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

var testHeader = header{cell: 0xc0ffee, incarnation: 42}

func TestWireRoundTrip(t *testing.T) {
	t.Parallel()
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		Entries: []*pb.Entry{{Index: new(uint64(7)), Term: new(uint64(3)), Data: []byte("x")}}}
	b, err := testHeader.encodeRaft(m)
	require.NoError(t, err)
	d, err := decodeEnvelope(b)
	require.NoError(t, err)
	require.Equal(t, uint64(7), d.raft.GetEntries()[0].GetIndex())
	require.Equal(t, testHeader, d.header, "the header travels with every kind")

	c := &chunk{From: 1, Index: 10, Term: 2, Seq: 3, Last: true, Data: []byte("state")}
	d, err = decodeEnvelope(testHeader.encodeChunk(c))
	require.NoError(t, err)
	require.Equal(t, c, d.chunk)

	a := &chunkAck{From: 2, Index: 10, Term: 2, Seq: 3, OK: true}
	d, err = decodeEnvelope(testHeader.encodeAck(a))
	require.NoError(t, err)
	require.Equal(t, a, d.ack)

	d, err = decodeEnvelope(testHeader.encodeApp([]byte("hi")))
	require.NoError(t, err)
	require.Equal(t, []byte("hi"), d.app)

	d, err = decodeEnvelope(testHeader.encodeReject())
	require.NoError(t, err)
	require.Equal(t, kindReject, d.kind)
	require.Equal(t, testHeader, d.header)

	d, err = decodeEnvelope(testHeader.encodeProbe())
	require.NoError(t, err)
	require.Equal(t, kindProbe, d.kind)
	require.Equal(t, testHeader, d.header)

	r := removedNotice{Target: 9, Incarnation: 1 << 60}
	d, err = decodeEnvelope(testHeader.encodeRemoved(r))
	require.NoError(t, err)
	require.Equal(t, kindRemoved, d.kind)
	require.Equal(t, &r, d.removed)

	pa := peerAddr{ID: 1 << 63, Addr: "10.0.0.4:7001"}
	d, err = decodeEnvelope(testHeader.encodePeerAddr(pa))
	require.NoError(t, err)
	require.Equal(t, kindPeerAddr, d.kind)
	require.Equal(t, &pa, d.addr)
}

func TestWireRefusesUnknownVersionAndKind(t *testing.T) {
	t.Parallel()
	full := func(kind byte, body ...byte) []byte {
		return append(header{}.put(nil, wireKind(kind)), body...)
	}
	for _, b := range [][]byte{nil, {wireVersion}, {wireVersion + 1, byte(kindRaft)}, {1, byte(kindRaft), 0, 0},
		full(99), full(byte(kindChunk), 0xff), full(byte(kindRaft))[:headerLen-1],
		full(byte(kindReject), 0), full(byte(kindProbe), 1, 2),
		full(byte(kindRemoved)), full(byte(kindRemoved), 9), full(byte(kindRemoved), 0, 1), full(byte(kindRemoved), 9, 1, 0),
		full(byte(kindPeerAddr)), full(byte(kindPeerAddr), 9), full(byte(kindPeerAddr), 0, 'a'),
		append(full(byte(kindPeerAddr), 9), make([]byte, maxPeerAddrLen+1)...)} {
		_, err := decodeEnvelope(b)
		require.ErrorIs(t, err, errWire, "%x", b)
	}
}

// FuzzDecodeEnvelope: whatever a peer sends, decoding fails cleanly or
// yields exactly one message.
func FuzzDecodeEnvelope(f *testing.F) {
	b, _ := testHeader.encodeRaft(&pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(2))})
	f.Add(b)
	f.Add(testHeader.encodeChunk(&chunk{From: 1, Index: 2, Term: 3, Seq: 4, Data: []byte("d")}))
	f.Add(testHeader.encodeAck(&chunkAck{From: 1, Index: 2, Term: 3, Seq: 4}))
	f.Add(testHeader.encodeApp(nil))
	f.Add(testHeader.encodeProbe())
	f.Add(testHeader.encodeRemoved(removedNotice{Target: 1, Incarnation: 2}))
	f.Add(testHeader.encodePeerAddr(peerAddr{ID: 1, Addr: "a:1"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeEnvelope(data)
		if err != nil {
			return
		}
		n := 0
		for _, set := range []bool{d.raft != nil, d.chunk != nil, d.ack != nil, d.app != nil, d.removed != nil, d.addr != nil} {
			if set {
				n++
			}
		}
		if n != 1 && d.kind != kindReject && d.kind != kindProbe {
			t.Fatalf("decoded %d messages from %x", n, data)
		}
	})
}

func TestAppliedIndexWaiters(t *testing.T) {
	t.Parallel()
	var a appliedIndex
	a.init(5)
	require.Nil(t, a.wait(5), "already applied")
	w7, w9 := a.wait(7), a.wait(9)
	a.set(7)
	<-w7
	select {
	case <-w9:
		t.Fatal("woken before its index applied")
	default:
	}
	a.set(10)
	<-w9
	require.Empty(t, a.waits)
}
