package wal

import (
	"encoding/binary"
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func readFile(t testing.TB, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	require.NoError(t, err)
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return b
}

func writeFile(t testing.TB, fs vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	// A copy: vfs files may scribble on what they are given to write
	// (Pebble's race builds do, to catch callers that reuse it).
	_, err = f.Write(append([]byte(nil), b...))
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// history is a log in one segment written by synced appends, with the
// model and the segment's length after each.
type history struct {
	fs     vfs.FS
	name   string
	models []*model
	ends   []int64
}

func writeHistory(t *testing.T, g *gen, appends int) *history {
	fs := vfs.NewMem()
	l := openMem(t, fs, 128<<10)
	h := &history{fs: fs, name: l.tail.name}
	m := &model{}
	h.models, h.ends = append(h.models, m.clone()), append(h.ends, l.off)
	for i := 0; i < appends || l.off == h.ends[0]; i++ {
		hs, ents := g.hardState(m), g.entries(m)
		require.NoError(t, l.Append(hs, ents, true))
		m.append(hs, ents)
		h.models, h.ends = append(h.models, m.clone()), append(h.ends, l.off)
	}
	require.NoError(t, l.Close())
	return h
}

// TestTornTailRandomTruncation cuts the segment at random lengths, as a
// crash in the middle of a write would, and checks that the log opens
// with every frame that was whole and nothing of the torn one.
func TestTornTailRandomTruncation(t *testing.T) {
	t.Parallel()
	rng := seeded(t)
	g := &gen{rng: rng, term: 1}
	for trial := range 200 {
		h := writeHistory(t, g, 1+rng.IntN(30))
		data := readFile(t, h.fs, h.name)
		end := h.ends[len(h.ends)-1] + 64
		cut := rng.Int64N(end-h.ends[0]) + h.ends[0] // keep the header
		writeFile(t, h.fs, h.name, data[:cut])
		want := 0
		for i, end := range frameEnds(data, h.ends) {
			if end <= cut {
				want = i
			}
		}
		l, err := Open(Options{FS: h.fs, Dir: "wal", SegmentBytes: 128 << 10})
		require.NoError(t, err, "trial %d: cut at %d", trial, cut)
		h.models[want].check(t, l)
		// The log goes on from there, and reopens the same.
		m := h.models[want].clone()
		hs, ents := g.hardState(m), g.entries(m)
		require.NoError(t, l.Append(hs, ents, true))
		m.append(hs, ents)
		require.NoError(t, l.Close())
		l, err = Open(Options{FS: h.fs, Dir: "wal", SegmentBytes: 128 << 10})
		require.NoError(t, err)
		m.check(t, l)
		require.NoError(t, l.Close())
	}
}

// TestBitFlips flips one random bit of a segment. A flip in the last
// frame is a torn tail (that frame is dropped); a flip in any earlier
// frame is damage to synced data and must be refused with ErrCorrupt; a
// flip in the zero padding between frames changes nothing.
func TestBitFlips(t *testing.T) {
	t.Parallel()
	rng := seeded(t)
	g := &gen{rng: rng, term: 1}
	var refused, torn, padding int
	for trial := range 300 {
		h := writeHistory(t, g, 1+rng.IntN(20))
		data := readFile(t, h.fs, h.name)
		ends := frameEnds(data, h.ends)
		at := rng.Int64N(h.ends[len(h.ends)-1])
		data[at] ^= 1 << rng.IntN(8)
		writeFile(t, h.fs, h.name, data)
		frame := 0 // the header is frame 0, append i is frame i
		for at >= h.ends[frame] {
			frame++
		}
		inPadding := at >= ends[frame]
		l, err := Open(Options{FS: h.fs, Dir: "wal", SegmentBytes: 128 << 10})
		last := len(h.ends) - 1
		for last > 0 && h.ends[last-1] == h.ends[last] {
			last-- // appends of nothing write no frame
		}
		switch {
		case inPadding:
			padding++
			require.NoError(t, err, "trial %d: flip at %d in padding", trial, at)
			h.models[last].check(t, l)
		case frame == last:
			torn++
			require.NoError(t, err, "trial %d: flip at %d in the last frame", trial, at)
			h.models[last-1].check(t, l)
		default:
			refused++
			require.ErrorIs(t, err, ErrCorrupt, "trial %d: flip at %d in frame %d of %d", trial, at, frame, last)
			continue
		}
		require.NoError(t, l.Close())
	}
	t.Logf("refused %d, torn tails %d, padding %d", refused, torn, padding)
	require.Positive(t, refused)
	require.Positive(t, torn)
}

// TestSealedSegmentDamage damages an older segment, and removes a middle
// one: both are refused.
func TestSealedSegmentDamage(t *testing.T) {
	t.Parallel()
	rng := seeded(t)
	g := &gen{rng: rng, term: 1}
	fs := vfs.NewMem()
	l := openMem(t, fs, 2048)
	m := &model{}
	for len(l.segs) < 4 {
		hs, ents := g.hardState(m), g.entries(m)
		require.NoError(t, l.Append(hs, ents, true))
		m.append(hs, ents)
	}
	names := []string{l.segs[0].name, l.segs[1].name, l.segs[2].name}
	require.NoError(t, l.Close())

	data := readFile(t, fs, names[1])
	at := 100 + rng.IntN(300)
	data[at] ^= 0x10
	writeFile(t, fs, names[1], data)
	_, err := Open(Options{FS: fs, Dir: "wal", SegmentBytes: 2048})
	require.ErrorIs(t, err, ErrCorrupt, "flip at %d of a sealed segment", at)
	data[at] ^= 0x10
	writeFile(t, fs, names[1], data)
	l, err = Open(Options{FS: fs, Dir: "wal", SegmentBytes: 2048})
	require.NoError(t, err)
	m.check(t, l)
	require.NoError(t, l.Close())

	// Without the second segment, its entries are missing.
	require.NoError(t, fs.Remove(names[1]))
	_, err = Open(Options{FS: fs, Dir: "wal", SegmentBytes: 2048})
	require.ErrorIs(t, err, ErrCorrupt)
}

// TestUnknownVersionRefused reads a segment written by a later format.
func TestUnknownVersionRefused(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("wal", 0o755))
	fr := frameBuf{}
	fr.start(kindHeader)
	fr.number(1, 0)
	fr.u64(FormatVersion + 1)
	fr.u64(0)
	fr.u64(0)
	require.NoError(t, fr.hardState(&pb.HardState{Term: proto.Uint64(1)}))
	writeFile(t, fs, "wal/"+segmentName(1), fr.finish(1))
	_, err := Open(Options{FS: fs, Dir: "wal"})
	require.ErrorIs(t, err, ErrFormat)
}

// frameEnds returns where each frame's bytes end, before its padding,
// given where each frame (padded) ends.
func frameEnds(data []byte, padded []int64) []int64 {
	out := make([]int64, len(padded))
	start := int64(0)
	for i, end := range padded {
		if i > 0 && end == padded[i-1] {
			out[i] = out[i-1] // an append of nothing writes no frame
			continue
		}
		out[i] = start + frameHeaderLen + int64(binary.BigEndian.Uint32(data[start:]))
		start = end
	}
	return out
}

// TestRefusedOpenWritesNothing: a log that Open refuses is left exactly
// as it was, even where recovery would have cut a torn tail or removed
// an unfinished segment before finding the damage that refuses it.
func TestRefusedOpenWritesNothing(t *testing.T) {
	t.Parallel()
	for _, tail := range []string{"torn", "unfinished"} {
		t.Run(tail, func(t *testing.T) {
			rng := seeded(t)
			// Append only: an overwrite back to the log's first entries in
			// a later segment would make the lost one unneeded, and the
			// log whole without it (seed 9178779492582300485).
			g := &gen{rng: rng, term: 1, appendOnly: true}
			fs := vfs.NewMem()
			l := openMem(t, fs, 2048)
			m := &model{}
			for len(l.segs) < 4 {
				hs, ents := g.hardState(m), g.entries(m)
				require.NoError(t, l.Append(hs, ents, true))
				m.append(hs, ents)
			}
			names := []string{l.segs[0].name, l.segs[1].name, l.segs[2].name, l.segs[3].name}
			require.NoError(t, l.Close())
			// The second segment is lost: the log cannot be whole.
			require.NoError(t, fs.Remove(names[1]))
			newest := readFile(t, fs, names[3])
			switch tail {
			case "torn":
				last := int64(0)
				for o := int64(0); binary.BigEndian.Uint32(newest[o:]) != 0; {
					last = o
					o = alignUp(o + frameHeaderLen + int64(binary.BigEndian.Uint32(newest[o:])))
				}
				require.Positive(t, last, "frames after the header")
				newest[last+frameHeaderLen+3] ^= 0xff // the last frame, torn
			case "unfinished":
				// A segment begun after the newest, not even its header
				// synced.
				writeFile(t, fs, "wal/"+segmentName(5), []byte{0, 0, 0, 40, 1, 2, 3})
			}
			writeFile(t, fs, names[3], newest)
			before := map[string][]byte{}
			list, err := fs.List("wal")
			require.NoError(t, err)
			for _, name := range list {
				before[name] = readFile(t, fs, "wal/"+name)
			}
			_, err = Open(Options{FS: fs, Dir: "wal", SegmentBytes: 2048})
			require.ErrorIs(t, err, ErrCorrupt)
			after := map[string][]byte{}
			list, err = fs.List("wal")
			require.NoError(t, err)
			for _, name := range list {
				after[name] = readFile(t, fs, "wal/"+name)
			}
			require.Equal(t, before, after)
		})
	}
}
