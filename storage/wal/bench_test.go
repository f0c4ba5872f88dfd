package wal

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
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

// BenchmarkOpenGarbageSegment opens, on a real disk, a log of full
// default-sized segments whose newest segment holds bytes of an older
// one: a copy over all of it (512 KiB of them, as a durability run
// found, and the whole 32 MiB), and the same after its own frames. The
// search for a synced frame after a bad one used to checksum, at every
// 8-byte offset, the "length" read there: 13.7 s for 0.5 MB of log in
// that run. The copy is refused (ErrCorrupt) or, before that was so,
// removed as a segment a crash cut short; garbage after frames is cut
// off as a torn tail. Each iteration restores the segment first.
func BenchmarkOpenGarbageSegment(b *testing.B) {
	for _, keepFrames := range []bool{false, true} {
		for _, garbage := range []int64{512 << 10, DefaultSegmentBytes} {
			name := "copy"
			if keepFrames {
				name = "after-frames"
			}
			b.Run(name+"/garbage="+strconv.FormatInt(garbage>>10, 10)+"KiB", func(b *testing.B) {
				dir := filepath.Join(b.TempDir(), "wal")
				newest, want := garbageLog(b, rand.New(rand.NewPCG(1, 2)), vfs.Default, dir, DefaultSegmentBytes, garbage, keepFrames)
				damaged := readFile(b, vfs.Default, newest)
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					writeFile(b, vfs.Default, newest, damaged)
					b.StartTimer()
					l, err := Open(Options{Dir: dir})
					b.StopTimer()
					switch {
					case errors.Is(err, ErrCorrupt) && !keepFrames:
					case err != nil:
						b.Fatal(err)
					default:
						require.Equal(b, want.last(), l.LastIndex())
						require.NoError(b, l.Close())
					}
					b.StartTimer()
				}
			})
		}
	}
}
