package storage

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// hashTree returns every file under dir on fs, by path, with a hash of
// its bytes.
func hashTree(t *testing.T, fs vfs.FS, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		names, err := fs.List(dir)
		require.NoError(t, err)
		for _, name := range names {
			path := fs.PathJoin(dir, name)
			st, err := fs.Stat(path)
			require.NoError(t, err)
			if st.IsDir() {
				walk(path)
				continue
			}
			sum := sha256.Sum256(readVFS(t, fs, path))
			out[path] = hex.EncodeToString(sum[:])
		}
	}
	walk(dir)
	return out
}

func readVFS(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return b
}

func writeVFS(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, err = f.Write(append([]byte(nil), b...))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

// segments returns the Raft log's segment files in dir, oldest first.
func segments(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(fs.PathJoin(dir, walDir))
	require.NoError(t, err)
	var out []string
	for _, name := range names {
		if filepath.Ext(name) == ".wal" {
			out = append(out, fs.PathJoin(dir, walDir, name))
		}
	}
	require.NotEmpty(t, out)
	return out
}

// frameStarts returns the offsets of the frames of a segment's bytes.
func frameStarts(data []byte) []int64 {
	var out []int64
	for off := int64(0); off+8 <= int64(len(data)); {
		n := int64(binary.BigEndian.Uint32(data[off:]))
		if n == 0 {
			break
		}
		out = append(out, off)
		off = (off + 8 + n + 7) &^ 7
	}
	return out
}

// appendNoops appends n empty entries in term 1 after the log's last
// index, synced, and returns them.
func appendNoops(t *testing.T, s *Store, n int) []*pb.Entry {
	t.Helper()
	last, _ := s.RaftLog().LastIndex()
	ents := make([]*pb.Entry, n)
	for i := range ents {
		ents[i] = &pb.Entry{Index: new(last + 1 + uint64(i)), Term: new(uint64(1))}
	}
	hs := &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(0))}
	require.NoError(t, s.Append(hs, ents, true))
	return ents
}

// storeWithApplied writes ten synced appends of 20 empty entries, applies
// the first applied of them, and closes the store. It returns the store
// directory's newest (only) segment.
func storeWithApplied(t *testing.T, dir string, applied int) string {
	t.Helper()
	s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
	require.NoError(t, err)
	var ents []*pb.Entry
	for range 10 {
		ents = append(ents, appendNoops(t, s, 20)...)
	}
	_, err = s.StateMachine().Apply(ents[:applied], nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	segs := segments(t, vfs.Default, dir)
	return segs[len(segs)-1]
}

// cutAtFrame truncates the segment 100 bytes into its frame k (frame 0
// is its header, frame i the i-th append), as a torn write would leave
// it: appends 1 to k-1 remain.
func cutAtFrame(t *testing.T, path string, k int) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	starts := frameStarts(data)
	require.Greater(t, len(starts), k)
	require.NoError(t, os.Truncate(path, starts[k]+100))
}

// multiSegmentStore writes a store on an in-memory disk (256 KiB
// segments) until its Raft log has at least three segments, and closes
// it.
func multiSegmentStore(t *testing.T) *MemDisk {
	t.Helper()
	disk := NewMemDisk()
	s, err := Open(Options{Disk: disk})
	require.NoError(t, err)
	for len(segments(t, disk.fs, "/coord")) < 3 {
		require.NoError(t, appendEntries(t, s, 20, 4096, 1, 1))
	}
	require.NoError(t, s.Close())
	return disk
}

// TestRefusedOpenChangesNothing damages a data directory in each way
// Open refuses, and checks that the refused Open left every file of it
// byte for byte as it was: nothing cut off as a torn tail, no segment
// removed, no reset frame or hard state written, and nothing written by
// Pebble (its open flushes, and writes a new manifest, WAL and OPTIONS
// file). A refused member's directory is the evidence of what it lost.
func TestRefusedOpenChangesNothing(t *testing.T) {
	t.Parallel()
	type damaged struct {
		fs   vfs.FS
		dir  string
		opts Options
	}
	onDisk := func(dir string) damaged {
		return damaged{fs: vfs.Default, dir: dir, opts: Options{Dir: dir, segmentBytes: testSegmentBytes}}
	}
	inMem := func(disk *MemDisk) damaged { return damaged{fs: disk.fs, dir: "/coord", opts: Options{Disk: disk}} }
	cases := []struct {
		name   string
		want   error
		damage func(t *testing.T) damaged
	}{
		{"log tail truncated", ErrLostState, func(t *testing.T) damaged {
			dir := t.TempDir()
			writeSyncedLog(t, dir)
			path, size := newestWAL(t, dir)
			require.NoError(t, os.Truncate(path, size-3000))
			return onDisk(dir)
		}},
		{"log tail flipped", ErrLostState, func(t *testing.T) damaged {
			dir := t.TempDir()
			writeSyncedLog(t, dir)
			path, size := newestWAL(t, dir)
			for off := size - 3000; off < size-2000; off += 97 {
				flipByte(t, path, off)
			}
			return onDisk(dir)
		}},
		{"newest segment holds an older one's bytes", ErrLostState, func(t *testing.T) damaged {
			disk := multiSegmentStore(t)
			segs := segments(t, disk.fs, "/coord")
			writeVFS(t, disk.fs, segs[len(segs)-1], readVFS(t, disk.fs, segs[0]))
			return inMem(disk)
		}},
		{"sealed segment flipped", ErrLostState, func(t *testing.T) damaged {
			disk := multiSegmentStore(t)
			seg := segments(t, disk.fs, "/coord")[0]
			data := readVFS(t, disk.fs, seg)
			data[10_000] ^= 0x5a
			writeVFS(t, disk.fs, seg, data)
			return inMem(disk)
		}},
		{"log ends before the applied entry", ErrLostState, func(t *testing.T) damaged {
			// The log restarts after the applied entry (a reset frame
			// and hard state) and is then found short of what it synced.
			dir := t.TempDir()
			cutAtFrame(t, storeWithApplied(t, dir, 50), 2)
			return onDisk(dir)
		}},
		{"log holds the applied entry, not its tail", ErrLostState, func(t *testing.T) damaged {
			// The commit index is raised to the applied one (a hard
			// state written) before the log is found short.
			dir := t.TempDir()
			cutAtFrame(t, storeWithApplied(t, dir, 10), 2)
			return onDisk(dir)
		}},
		{"state machine older than the log's start", ErrLostState, func(t *testing.T) damaged {
			dir := t.TempDir()
			s, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
			require.NoError(t, err)
			ents := appendNoops(t, s, 100)
			_, err = s.StateMachine().Apply(ents[:30], nil)
			require.NoError(t, err)
			require.NoError(t, s.Close())
			old := copyPebble(t, dir, t.TempDir())
			s, err = Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
			require.NoError(t, err)
			_, err = s.StateMachine().Apply(ents[30:], nil)
			require.NoError(t, err)
			require.NoError(t, s.Sync())
			require.NoError(t, s.RaftLog().Compact(80))
			require.NoError(t, s.Close())
			clearPebble(t, dir)
			copyPebble(t, old, dir)
			return onDisk(dir)
		}},
		{"durability record missing", ErrLostState, func(t *testing.T) damaged {
			dir := t.TempDir()
			writeSyncedLog(t, dir)
			require.NoError(t, os.Remove(filepath.Join(dir, marksFile)))
			return onDisk(dir)
		}},
		{"durability record unreadable", ErrLostState, func(t *testing.T) damaged {
			dir := t.TempDir()
			writeSyncedLog(t, dir)
			flipByte(t, filepath.Join(dir, marksFile), 5)
			flipByte(t, filepath.Join(dir, marksFile), marksSlotSize+5)
			return onDisk(dir)
		}},
		{"raft log directory missing", ErrLostState, func(t *testing.T) damaged {
			dir := t.TempDir()
			writeSyncedLog(t, dir)
			require.NoError(t, os.RemoveAll(filepath.Join(dir, walDir)))
			return onDisk(dir)
		}},
		{"unknown store format", ErrFormat, func(t *testing.T) damaged {
			dir := t.TempDir()
			writeSyncedLog(t, dir)
			db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
			require.NoError(t, err)
			require.NoError(t, db.Set([]byte{prefixFormat}, appendUint64(nil, FormatVersion+1), pebble.Sync))
			require.NoError(t, db.Close())
			return onDisk(dir)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.damage(t)
			before := hashTree(t, d.fs, d.dir)
			for range 2 { // and the second refusal is the first's
				s, err := Open(d.opts)
				if err == nil {
					s.Close()
					t.Fatal("opened a damaged store")
				}
				require.ErrorIs(t, err, c.want)
				require.Equal(t, before, hashTree(t, d.fs, d.dir), "files after the refused Open: %v", err)
			}
		})
	}
}

// copyPebble copies the store directory from's files but the Raft log
// and the durability record (Pebble's, that is) into to, and returns to.
func copyPebble(t *testing.T, from, to string) string {
	t.Helper()
	names, err := os.ReadDir(from)
	require.NoError(t, err)
	for _, e := range names {
		if e.IsDir() || e.Name() == marksFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, e.Name()), b, 0o644))
	}
	return to
}

// clearPebble removes Pebble's files from the store directory dir.
func clearPebble(t *testing.T, dir string) {
	t.Helper()
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range names {
		if !e.IsDir() && e.Name() != marksFile {
			require.NoError(t, os.Remove(filepath.Join(dir, e.Name())))
		}
	}
}
