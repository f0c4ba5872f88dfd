package storage

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestDataDirSoak applies a long write load to a store on the real disk
// and logs the size of its data directory as it goes: it is how the
// directory's growth is measured, not a check run by default (minutes of
// disk I/O). COORD_STORAGE_SOAK is the number of changes to apply, e.g.
// 2000000.
//
// The load follows the cell soak of issue 12, one simulated second per
// round: 300 puts over 5,000 keys, 20 sessions created and 20 ended (each
// with a few keys of its own), and 20 lock cycles (an ephemeral key put
// and deleted), in batches of about 12 entries, with the default history
// window.
func TestDataDirSoak(t *testing.T) {
	t.Parallel()
	n, _ := strconv.Atoi(os.Getenv("COORD_STORAGE_SOAK"))
	if n <= 0 {
		t.Skip("set COORD_STORAGE_SOAK to a number of changes to run the soak")
	}
	dir := t.TempDir()
	st, err := Open(Options{Dir: dir, segmentBytes: testSegmentBytes})
	require.NoError(t, err)
	defer st.Close()
	sm := st.StateMachine()

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	// Random values: zeros would compress to nothing in the tables.
	values := make([][]byte, 64)
	for i := range values {
		values[i] = make([]byte, 100)
		for j := range values[i] {
			values[i][j] = byte(rng.Uint32())
		}
	}
	next := uint64(1)
	var (
		ents     []*pb.Entry
		sessions []int64
		changes  int
		lockSeq  int
	)
	add := func(c *command.Command) {
		data, err := command.Encode(c)
		require.NoError(t, err)
		ents = append(ents, &pb.Entry{Index: new(next), Term: new(uint64(1)), Data: data})
		next++
	}
	flush := func() {
		if len(ents) == 0 {
			return
		}
		out, err := sm.Apply(ents, nil)
		require.NoError(t, err)
		for _, r := range out.Results {
			if r.Result.SessionID != 0 && r.Result.Status == command.StatusOK {
				if _, ok := findInt64(sessions, r.Result.SessionID); !ok {
					sessions = append(sessions, r.Result.SessionID)
				}
			}
		}
		for _, id := range out.SessionsEnded {
			if i, ok := findInt64(sessions, id); ok {
				sessions = append(sessions[:i], sessions[i+1:]...)
			}
		}
		changes += len(out.Changes)
		ents = ents[:0]
	}

	start := time.Now()
	report := 0
	for changes < n {
		for i := range 300 {
			add(txnCmd(command.Txn{Then: []command.Op{{
				Type: command.OpPut, Key: fmt.Sprintf("soak/k/%04d", rng.IntN(5000)), Value: values[rng.IntN(len(values))],
			}}}))
			if i%15 == 14 {
				// A session comes, one goes (with its keys), a lock cycles.
				add(&command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9}})
				if len(sessions) > 40 {
					id := sessions[rng.IntN(len(sessions))]
					add(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: id, Expired: true}})
				}
				if len(sessions) > 0 {
					id := sessions[rng.IntN(len(sessions))]
					lockSeq++
					key := fmt.Sprintf("soak/lock/%d/%08d", rng.IntN(20), lockSeq)
					add(txnCmd(command.Txn{Then: []command.Op{ephemeralPut(key, "holder", id)}}))
					add(txnCmd(command.Txn{Then: []command.Op{ephemeralPut(fmt.Sprintf("soak/s/%d/%d", id, lockSeq), "x", id)}}))
					add(txnCmd(command.Txn{Then: []command.Op{delOp(key)}}))
				}
				flush()
			}
		}
		flush()
		if changes >= report {
			m := st.db.Metrics()
			t.Logf("changes %8d  dir %6.1f MB  tables %3d %6.1f MB  garbage point %5.1f MB range %5.1f MB  elapsed %v",
				changes, mb(dirBytes(t, dir)), m.Table.Local.LiveCount, mb(m.Table.Local.LiveSize),
				mb(m.Table.Garbage.PointDeletionsBytesEstimate), mb(m.Table.Garbage.RangeDeletionsBytesEstimate),
				time.Since(start).Round(time.Second))
			report += n / 20
		}
	}
	require.NoError(t, st.Sync())
	files, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, f := range files {
		if info, err := f.Info(); err == nil && info.Size() > 1<<20 {
			t.Logf("%s: %.1f MB", f.Name(), mb(info.Size()))
		}
	}
	t.Logf("end: changes %d, dir %.1f MB, %v", changes, mb(dirBytes(t, dir)), time.Since(start).Round(time.Second))
}

func mb[N int64 | uint64](n N) float64 { return float64(n) / (1 << 20) }

func findInt64(s []int64, v int64) (int, bool) {
	for i, x := range s {
		if x == v {
			return i, true
		}
	}
	return 0, false
}

// dirBytes is the size of the files under dir.
func dirBytes(t testing.TB, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			// Pebble deletes obsolete files while we walk.
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	require.NoError(t, err)
	return n
}
