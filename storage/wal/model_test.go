package wal

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// model is what a log should hold, kept the simple way.
type model struct {
	trunc, truncTerm uint64
	ents             []*pb.Entry
	hs               *pb.HardState
}

func (m *model) last() uint64 { return m.trunc + uint64(len(m.ents)) }

func (m *model) clone() *model {
	c := *m
	c.ents = append([]*pb.Entry(nil), m.ents...)
	return &c
}

func (m *model) append(hs *pb.HardState, ents []*pb.Entry) {
	if hs != nil {
		m.hs = hs
	}
	for _, e := range ents {
		if e.GetIndex() <= m.trunc {
			continue
		}
		m.ents = append(m.ents[:e.GetIndex()-m.trunc-1], e)
	}
}

func (m *model) compact(i uint64) {
	if i <= m.trunc {
		return
	}
	m.truncTerm = m.ents[i-m.trunc-1].GetTerm()
	m.ents = m.ents[i-m.trunc:]
	m.trunc = i
}

func (m *model) reset(i, term uint64, hs *pb.HardState) {
	m.trunc, m.truncTerm, m.ents = i, term, nil
	if hs != nil {
		m.hs = hs
	}
}

// check fails the test unless l holds what m does.
func (m *model) check(t testing.TB, l *Log) {
	t.Helper()
	require.Equal(t, m.trunc+1, l.FirstIndex(), "first index")
	require.Equal(t, m.last(), l.LastIndex(), "last index")
	term, err := l.Term(m.trunc)
	require.NoError(t, err)
	require.Equal(t, m.truncTerm, term, "term at the truncation point")
	if m.trunc > 0 {
		_, err = l.Term(m.trunc - 1)
		require.ErrorIs(t, err, raft.ErrCompacted)
	}
	_, err = l.Term(m.last() + 1)
	require.ErrorIs(t, err, raft.ErrUnavailable)
	got, err := l.Entries(m.trunc+1, m.last()+1, 1<<62)
	require.NoError(t, err)
	require.Len(t, got, len(m.ents))
	for i, e := range m.ents {
		require.True(t, proto.Equal(e, got[i]), "entry %d: got %v, want %v", e.GetIndex(), got[i], e)
		term, err := l.Term(e.GetIndex())
		require.NoError(t, err)
		require.Equal(t, e.GetTerm(), term)
	}
	hs := l.HardState()
	if m.hs == nil {
		require.Nil(t, hs)
	} else {
		require.True(t, proto.Equal(m.hs, hs), "hard state: got %v, want %v", hs, m.hs)
	}
}

// equalsAny reports which of the models l matches, or -1.
func equalsAny(l *Log, ms []*model) int {
	for i := len(ms) - 1; i >= 0; i-- {
		ok := true
		t := &probe{}
		func() {
			defer func() {
				if recover() != nil {
					ok = false
				}
			}()
			ms[i].check(t, l)
		}()
		if ok && !t.failed {
			return i
		}
	}
	return -1
}

// probe is a testing.TB that panics at the first failure, so a check
// can be asked "does it match" without failing the test.
type probe struct {
	testing.TB
	failed bool
}

func (p *probe) Helper() {}
func (p *probe) Errorf(string, ...any) {
	p.failed = true
}
func (p *probe) FailNow() { panic(p) }

// gen makes random operations.
type gen struct {
	rng  *rand.Rand
	term uint64
	// appendOnly: every append adds at least one entry after the last
	// and overwrites none, so every segment holds entries the log needs.
	appendOnly bool
}

func (g *gen) entries(m *model) []*pb.Entry {
	lo := m.last() + 1
	if back := uint64(g.rng.IntN(4)); !g.appendOnly && m.last()-m.trunc >= back {
		lo -= back // overwrite a suffix now and then
	}
	if g.rng.IntN(4) == 0 {
		g.term++
	}
	n := g.rng.IntN(6)
	if g.appendOnly {
		n++
	}
	ents := make([]*pb.Entry, n)
	for i := range ents {
		data := make([]byte, g.rng.IntN(300))
		for j := range data {
			data[j] = byte(g.rng.Uint32())
		}
		ents[i] = &pb.Entry{Index: proto.Uint64(lo + uint64(i)), Term: proto.Uint64(g.term), Data: data}
		if g.rng.IntN(10) == 0 {
			ents[i].Type = pb.EntryConfChange.Enum()
		}
	}
	return ents
}

func (g *gen) hardState(m *model) *pb.HardState {
	if g.rng.IntN(3) > 0 {
		return nil
	}
	return &pb.HardState{Term: proto.Uint64(g.term), Vote: proto.Uint64(uint64(g.rng.IntN(4))), Commit: proto.Uint64(m.last())}
}

// step applies one random operation to l and m, and reports whether
// it made everything before it durable.
func (g *gen) step(t testing.TB, l *Log, m *model, sync bool) (synced bool) {
	t.Helper()
	switch r := g.rng.IntN(40); {
	case r < 34:
		hs, ents := g.hardState(m), g.entries(m)
		require.NoError(t, l.Append(hs, ents, sync))
		m.append(hs, ents)
		return sync
	case r < 39:
		if m.last() > m.trunc {
			i := m.trunc + 1 + uint64(g.rng.IntN(int(m.last()-m.trunc)))
			require.NoError(t, l.Compact(i))
			m.compact(i)
		}
		return false
	default:
		i := m.last() + uint64(g.rng.IntN(5))
		g.term++
		hs := &pb.HardState{Term: proto.Uint64(g.term), Commit: proto.Uint64(i)}
		require.NoError(t, l.Reset(i, g.term, hs))
		m.reset(i, g.term, hs)
		return true
	}
}

func seeded(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	if s := os.Getenv("WAL_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed))
}

func openMem(t testing.TB, fs vfs.FS, segBytes int64) *Log {
	t.Helper()
	l, err := Open(Options{FS: fs, Dir: "wal", SegmentBytes: segBytes})
	require.NoError(t, err)
	return l
}

// TestRandomAgainstModel runs random appends (with overwritten
// suffixes), compactions, resets and reopenings, on segments small
// enough to be cut and dropped often, and checks the log against the
// model after every step and every reopening.
func TestRandomAgainstModel(t *testing.T) {
	t.Parallel()
	rng := seeded(t)
	fs := vfs.NewMem()
	l := openMem(t, fs, 4096)
	defer func() { l.Close() }()
	m, g := &model{}, &gen{rng: rng, term: 1}
	for i := range 3000 {
		g.step(t, l, m, rng.IntN(4) > 0)
		m.check(t, l)
		if i%100 == 99 {
			require.NoError(t, l.Close())
			l = openMem(t, fs, 4096)
			m.check(t, l)
			names, err := fs.List("wal")
			require.NoError(t, err)
			require.Less(t, len(names), 40, "segments are dropped as the log is compacted")
		}
	}
}

// TestCrashKeepsWhatWasSynced cuts power at random moments, keeping a
// random part of what was written but not synced, and checks that the
// log reopens (never refused) holding exactly what it held at some
// moment since its last sync: nothing synced is lost, and what is kept
// of the rest is a prefix of it.
func TestCrashKeepsWhatWasSynced(t *testing.T) {
	t.Parallel()
	rng := seeded(t)
	fs := vfs.NewCrashableMem()
	l := openMem(t, fs, 8192)
	m, g := &model{}, &gen{rng: rng, term: 1}
	since := []*model{m.clone()}
	for round := range 200 {
		for range rng.IntN(20) {
			if g.step(t, l, m, rng.IntN(3) > 0) {
				since = since[:0]
			}
			since = append(since, m.clone())
		}
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})
		require.NoError(t, l.Close())
		fs = crashed
		var err error
		l, err = Open(Options{FS: fs, Dir: "wal", SegmentBytes: 8192})
		require.NoError(t, err, "round %d: a crash is never refused", round)
		k := equalsAny(l, since)
		if k < 0 {
			t.Logf("got first %d last %d hs %v", l.FirstIndex(), l.LastIndex(), l.HardState())
			for _, c := range since {
				t.Logf("candidate first %d last %d hs %v", c.trunc+1, c.last(), c.hs)
			}
		}
		require.GreaterOrEqual(t, k, 0, "round %d: after a crash the log holds what it held at a moment since its last sync", round)
		m = since[k].clone()
		since = []*model{m.clone()}
	}
	require.NoError(t, l.Close())
}

func TestEntriesSizeLimit(t *testing.T) {
	t.Parallel()
	l := openMem(t, vfs.NewMem(), 1<<20)
	defer l.Close()
	var ents []*pb.Entry
	for i := range 10 {
		ents = append(ents, &pb.Entry{Index: proto.Uint64(uint64(i + 1)), Term: proto.Uint64(1), Data: make([]byte, 100)})
	}
	require.NoError(t, l.Append(nil, ents, true))
	got, err := l.Entries(1, 11, 0)
	require.NoError(t, err)
	require.Len(t, got, 1, "at least one entry, whatever the limit")
	got, err = l.Entries(1, 11, uint64(3*proto.Size(ents[0])))
	require.NoError(t, err)
	require.Len(t, got, 3)
	_, err = l.Entries(1, 12, 1<<30)
	require.ErrorIs(t, err, raft.ErrUnavailable)
	require.NoError(t, l.Compact(4))
	_, err = l.Entries(4, 6, 1<<30)
	require.ErrorIs(t, err, raft.ErrCompacted)
	require.Error(t, l.Append(nil, []*pb.Entry{{Index: proto.Uint64(13), Term: proto.Uint64(1)}}, true), "a gap is refused")
}
