package wal

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// structuredData is an entry payload shaped like encoded commands:
// random bytes, and one word in 16 a big-endian length or count small
// enough to pass for a frame length in a segment of segBytes. Random
// bytes alone would not: their "lengths" almost all exceed the segment
// and are dismissed unread.
func structuredData(rng *rand.Rand, n int, segBytes int64) []byte {
	data := make([]byte, n&^3)
	for i := 0; i+4 <= len(data); i += 4 {
		v := rng.Uint32()
		if rng.IntN(16) == 0 {
			v = uint32(rng.Int64N(segBytes))
		}
		binary.BigEndian.PutUint32(data[i:], v)
	}
	return data
}

// garbageLog writes a log of segBytes segments until its third segment
// is begun, and then puts garbage bytes of the oldest segment into the
// newest (the rest of it zeros, as preallocated): over all of it, as a
// copy of an older segment over the newest leaves it, or, with
// keepFrames, after the newest segment's own frames. It returns the
// newest segment's name, and what the log held when that segment was cut
// (a copy over it) or when it was closed (garbage after its frames).
func garbageLog(t testing.TB, rng *rand.Rand, fs vfs.FS, dir string, segBytes, garbage int64, keepFrames bool) (newest string, want *model) {
	t.Helper()
	l, err := Open(Options{FS: fs, Dir: dir, SegmentBytes: segBytes})
	require.NoError(t, err)
	m := &model{}
	for len(l.segs) < 3 {
		want = m.clone() // the append that cuts the third segment is in it
		first := m.last() + 1
		ents := make([]*pb.Entry, 64)
		for i := range ents {
			ents[i] = &pb.Entry{Index: proto.Uint64(first + uint64(i)), Term: proto.Uint64(1),
				Data: structuredData(rng, 240, segBytes)}
		}
		hs := &pb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(1), Commit: proto.Uint64(first - 1)}
		require.NoError(t, l.Append(hs, ents, false))
		m.append(hs, ents)
	}
	oldest, newest, keep := l.segs[0].name, l.segs[2].name, int64(0)
	if keepFrames {
		keep, want = l.off, m
	}
	require.NoError(t, l.Close())
	data := readFile(t, fs, newest)
	clear(data[keep:])
	copy(data[keep:min(keep+garbage, int64(len(data)))], readFile(t, fs, oldest)[keep:])
	writeFile(t, fs, newest, data)
	return newest, want
}

// TestGarbageAfterFramesBoundedWork opens a log whose newest segment
// holds, after its own frames, bytes copied from an older one. None of
// them is a frame of the newest segment (each checksum is seeded with
// its own segment's number), so the search for a synced frame after the
// bad one finds nothing and they are cut off as a torn tail. The search
// used to checksum, at every 8-byte offset, as many bytes as the
// "length" read there claimed, up to the whole preallocated segment. The
// work is asserted in bytes checksummed: at most twice the bytes of the
// segments read.
func TestGarbageAfterFramesBoundedWork(t *testing.T) {
	t.Parallel()
	rng := seeded(t)
	const segBytes = 1 << 20
	fs := vfs.NewMem()
	newest, want := garbageLog(t, rng, fs, "wal", segBytes, 64<<10, true)
	// A torn tail ends at the last non-zero byte: the copied bytes may
	// end in zeros (seed 11789420427386005297: one).
	data := readFile(t, fs, newest)
	end := int64(len(data))
	for end > 0 && data[end-1] == 0 {
		end--
	}
	l, err := Open(Options{FS: fs, Dir: "wal", SegmentBytes: segBytes})
	require.NoError(t, err)
	defer l.Close()
	t.Logf("checksummed %d bytes recovering three segments of %d", l.scanCRCBytes, segBytes)
	require.LessOrEqual(t, l.scanCRCBytes, int64(2*3*segBytes), "bytes checksummed while recovering three segments of %d bytes", segBytes)
	want.check(t, l)
	require.Equal(t, end-l.off, l.Recovery().TornBytes, "the garbage, up to its last non-zero byte")
	require.InDelta(t, 64<<10, l.Recovery().TornBytes, 64, "the garbage copied was 64 KiB")
	_, err = fs.Stat(newest)
	require.NoError(t, err)
}

// TestGarbageSegmentRefused opens a log whose newest segment holds a copy
// of an older one. Its header is unreadable, but a header is synced
// before anything else is written to a segment, so bytes past where a
// header can end prove that it was once durable: the log is refused, and
// the segment, which used to be removed as one a crash cut short, stays
// as it was.
func TestGarbageSegmentRefused(t *testing.T) {
	t.Parallel()
	rng := seeded(t)
	const segBytes = 1 << 20
	fs := vfs.NewMem()
	newest, _ := garbageLog(t, rng, fs, "wal", segBytes, 64<<10, false)
	data := readFile(t, fs, newest)
	_, err := Open(Options{FS: fs, Dir: "wal", SegmentBytes: segBytes})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, data, readFile(t, fs, newest))
}
