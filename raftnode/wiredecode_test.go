package raftnode

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// randomMessage builds a message with a random selection of fields set,
// now and then with a snapshot or storage responses (the fallback path).
func randomMessage(r *rand.Rand) *pb.Message {
	u := func() *uint64 {
		if r.IntN(3) == 0 {
			return nil
		}
		v := r.Uint64() >> r.IntN(64)
		return &v
	}
	m := &pb.Message{To: u(), From: u(), Term: u(), LogTerm: u(), Index: u(), Commit: u(), Vote: u(), RejectHint: u()}
	if r.IntN(3) > 0 {
		m.Type = pb.MessageType(r.IntN(len(pb.MessageType_name))).Enum()
	}
	if r.IntN(3) == 0 {
		m.Reject = new(r.IntN(2) == 0)
	}
	if r.IntN(4) == 0 {
		m.Context = make([]byte, r.IntN(8))
	}
	for range r.IntN(20) {
		e := &pb.Entry{Term: u(), Index: u()}
		if r.IntN(2) == 0 {
			e.Type = pb.EntryType(r.IntN(len(pb.EntryType_name))).Enum()
		}
		if r.IntN(4) > 0 {
			e.Data = make([]byte, r.IntN(200))
			for i := range e.Data {
				e.Data[i] = byte(r.Uint32())
			}
		}
		m.Entries = append(m.Entries, e)
	}
	switch r.IntN(12) {
	case 0:
		m.Snapshot = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: u(), Term: u()}}
	case 1:
		m.Responses = []*pb.Message{{Type: pb.MsgAppResp.Enum(), Index: u()}}
	}
	return m
}

// mutate damages b the way a hostile or broken peer might.
func mutate(r *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	switch r.IntN(5) {
	case 0:
		if len(b) > 0 {
			b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
		}
	case 1:
		if len(b) > 0 {
			b = b[:r.IntN(len(b))]
		}
	case 2:
		for range 1 + r.IntN(4) {
			b = append(b, byte(r.Uint32()))
		}
	case 3: // an unknown field, or a known one in another wire type
		b = protowire.AppendTag(b, protowire.Number(1+r.IntN(20)), protowire.Type(r.IntN(6)))
		b = protowire.AppendVarint(b, r.Uint64()>>r.IntN(64))
	case 4: // a type no enum knows
		b = protowire.AppendTag(b, fMsgType, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(len(pb.MessageType_name))+r.Uint64()>>r.IntN(64))
	}
	return b
}

// requireSameDecoding checks decodeRaft against proto.Unmarshal on b.
func requireSameDecoding(t *testing.T, b []byte, msg string) {
	t.Helper()
	want := &pb.Message{}
	werr := proto.Unmarshal(b, want)
	got, err := decodeRaft(b)
	if werr != nil {
		require.ErrorIs(t, err, errWire, "%s: proto refused %x (%v)", msg, b, werr)
		return
	}
	require.NoError(t, err, "%s: %x", msg, b)
	require.True(t, proto.Equal(want, got), "%s: %x\nwant %v\ngot  %v", msg, b, want, got)
}

// TestDecodeRaftMatchesProto: for random messages, their concatenations
// (a field repeated on the wire) and damaged copies, the decoder accepts
// exactly what proto.Unmarshal accepts and yields an equal message.
func TestDecodeRaftMatchesProto(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 12))
	for i := range 3000 {
		b, err := proto.Marshal(randomMessage(r))
		require.NoError(t, err)
		requireSameDecoding(t, b, "whole")
		if i%3 == 0 {
			more, err := proto.Marshal(randomMessage(r))
			require.NoError(t, err)
			requireSameDecoding(t, append(b, more...), "concatenated")
		}
		requireSameDecoding(t, mutate(r, b), "mutated")
	}
	requireSameDecoding(t, nil, "empty")
}

// TestDecodeRaftEmptyBytesPresent: an empty data or context field reads
// as present (non-nil), as proto's decoding has it, whether or not the
// message carries other bytes.
func TestDecodeRaftEmptyBytesPresent(t *testing.T) {
	t.Parallel()
	for _, other := range [][]byte{nil, []byte("x")} {
		m := &pb.Message{Context: []byte{}, Entries: []*pb.Entry{{Data: []byte{}}, {Data: other}}}
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		got, err := decodeRaft(b)
		require.NoError(t, err)
		require.NotNil(t, got.Context)
		require.NotNil(t, got.Entries[0].Data)
		requireSameDecoding(t, b, "empty bytes")
	}
}

// TestDecodeRaftCopies: the decoded message does not alias the frame,
// which the transport may reuse, and its byte fields do not overlap.
func TestDecodeRaftCopies(t *testing.T) {
	t.Parallel()
	m := &pb.Message{Type: pb.MsgApp.Enum(), Context: []byte("ctx"),
		Entries: []*pb.Entry{{Data: []byte("one")}, {Data: []byte("two")}}}
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	got, err := decodeRaft(b)
	require.NoError(t, err)
	clear(b)
	require.Equal(t, []byte("one"), got.Entries[0].Data)
	got.Entries[0].Data = append(got.Entries[0].Data, '!')
	require.Equal(t, []byte("two"), got.Entries[1].Data)
	require.Equal(t, []byte("ctx"), got.Context)
}

// TestDecodeRaftAllocations: an append of 16 entries costs a bounded
// number of allocations, not a few per entry.
func TestDecodeRaftAllocations(t *testing.T) {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		LogTerm: new(uint64(3)), Index: new(uint64(10)), Commit: new(uint64(9))}
	for i := range 16 {
		m.Entries = append(m.Entries, &pb.Entry{Term: new(uint64(3)), Index: new(uint64(11 + i)), Data: make([]byte, 100)})
	}
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := decodeRaft(b); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 4.0)
}

// FuzzDecodeRaft: on any input, the decoder agrees with proto.Unmarshal.
func FuzzDecodeRaft(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		b, err := proto.Marshal(randomMessage(r))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { requireSameDecoding(t, b, "fuzz") })
}

// BenchmarkDecodeRaft decodes an append of 16 entries of 100 bytes.
func BenchmarkDecodeRaft(b *testing.B) {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		LogTerm: new(uint64(3)), Index: new(uint64(10)), Commit: new(uint64(9))}
	for i := range 16 {
		m.Entries = append(m.Entries, &pb.Entry{Term: new(uint64(3)), Index: new(uint64(11 + i)), Data: make([]byte, 100)})
	}
	data, err := proto.Marshal(m)
	require.NoError(b, err)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeRaft(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := unmarshalRaft(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
