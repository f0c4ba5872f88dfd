package wal

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkAppend is storage's BenchmarkStoreAppend/raftlog shape on
// the segment log: one synced Append per Ready, 1 and 64 entries of 128
// bytes, on a real disk, with segments cut and dropped as it goes.
func BenchmarkAppend(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run("entries="+strconv.Itoa(n), func(b *testing.B) {
			l, err := Open(Options{Dir: b.TempDir(), SegmentBytes: 4 << 20})
			require.NoError(b, err)
			defer l.Close()
			hs := &pb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(1), Commit: proto.Uint64(0)}
			data := make([]byte, 128)
			next := uint64(1)
			b.SetBytes(int64(n * 128))
			b.ReportAllocs()
			for b.Loop() {
				ents := make([]*pb.Entry, n)
				for k := range ents {
					ents[k] = &pb.Entry{Index: proto.Uint64(next + uint64(k)), Term: proto.Uint64(1), Data: data}
				}
				if err := l.Append(hs, ents, true); err != nil {
					b.Fatal(err)
				}
				next += uint64(n)
				if next%4096 < uint64(n) {
					require.NoError(b, l.Compact(next-1024))
				}
			}
		})
	}
}

// BenchmarkEntries reads back 64 recent entries, as raft does to apply
// and to send them.
func BenchmarkEntries(b *testing.B) {
	l, err := Open(Options{Dir: b.TempDir()})
	require.NoError(b, err)
	defer l.Close()
	data := make([]byte, 128)
	for i := range 64 {
		ents := make([]*pb.Entry, 64)
		for k := range ents {
			ents[k] = &pb.Entry{Index: proto.Uint64(uint64(i*64 + k + 1)), Term: proto.Uint64(1), Data: data}
		}
		require.NoError(b, l.Append(nil, ents, false))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Entries(4000, 4064, 1<<30); err != nil {
			b.Fatal(err)
		}
	}
}
