package coord_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

func TestBackupUnderWritesRestoresIntoNewCell(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		src := coordtest.NewCluster(t, 3)
		leader := src.Leader()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for i := range 50 {
			_, err := leader.Put(ctx, fmt.Sprintf("key/%03d", i%20), []byte(fmt.Sprint(i)))
			require.NoError(t, err)
		}
		s, err := leader.NewSession(ctx)
		require.NoError(t, err)
		_, err = coord.NewMutex(s, "held").Lock(ctx)
		require.NoError(t, err)
		_, err = leader.Put(ctx, "eph", []byte("x"), coord.Ephemeral(s))
		require.NoError(t, err)

		// Writers keep going while the backup is taken from a follower.
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if _, err := leader.Put(ctx, fmt.Sprintf("busy/%d", i%7), []byte(fmt.Sprint(i))); err != nil {
					return
				}
			}
		}()
		var buf bytes.Buffer
		require.NoError(t, src.Node((src.LeaderIndex()+1)%3).Backup(ctx, &buf))
		stop.Store(true)
		wg.Wait()

		info, backedUp, err := coord.ReadBackup(bytes.NewReader(buf.Bytes()))
		require.NoError(t, err)
		require.Equal(t, len(backedUp), info.Keys)
		want := map[string]coord.KV{}
		for _, kv := range backedUp {
			require.LessOrEqual(t, kv.ModRev, info.Revision)
			if kv.Session == 0 {
				want[kv.Key] = kv
			}
		}
		require.Contains(t, want, "key/000")
		require.NotContains(t, want, "eph")

		dirs := make([]string, 3)
		peers := make([]coord.Peer, 3)
		for i := range dirs {
			dirs[i] = filepath.Join(t.TempDir(), "data")
			peers[i] = coord.Peer{Name: fmt.Sprintf("n%d", i), Addr: fmt.Sprintf("n%d", i)}
		}
		for i := range dirs {
			require.NoError(t, coord.Restore(dirs[i], bytes.NewReader(buf.Bytes()),
				coord.RestoreOptions{Name: peers[i].Name, Peers: peers}))
		}
		// A restored directory is never restored over.
		require.ErrorIs(t, coord.Restore(dirs[0], bytes.NewReader(buf.Bytes()),
			coord.RestoreOptions{Name: "n0", Peers: peers}), coord.ErrDataDir)

		dst := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(i int, cfg *coord.Config) {
			cfg.DataDir = dirs[i]
		}))
		for i := range 3 {
			n := dst.Node(i)
			kvs, rev, err := n.List(ctx, "")
			require.NoError(t, err)
			require.GreaterOrEqual(t, rev, info.Revision)
			got := map[string]coord.KV{}
			for _, kv := range kvs {
				got[kv.Key] = kv
			}
			require.Equal(t, want, got, "member %d", i)
			require.Equal(t, info.Revision, n.Status().Revision)
		}
		// The new cell has no sessions, so the old lock is free, and its
		// grants' tokens exceed every revision of the old cell.
		n := dst.Leader()
		s2, err := n.NewSession(ctx)
		require.NoError(t, err)
		tok, err := coord.NewMutex(s2, "held").TryLock(ctx)
		require.NoError(t, err)
		require.Greater(t, int64(tok), info.Revision)
		kv, err := n.Put(ctx, "key/000", []byte("new"))
		require.NoError(t, err)
		require.Equal(t, want["key/000"].Version+1, kv.Version)
		require.Equal(t, want["key/000"].CreateRev, kv.CreateRev)
		require.NoError(t, s2.Close(ctx))
		require.NoError(t, s.Close(ctx))
	})
}

func TestRestoreRefusesBadBackups(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	n := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 10 {
		_, err := n.Put(ctx, fmt.Sprint("k", i), bytes.Repeat([]byte{byte(i)}, 100))
		require.NoError(t, err)
	}
	var buf bytes.Buffer
	require.NoError(t, n.Backup(ctx, &buf))
	good := buf.Bytes()

	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	newer := bytes.Clone(good)
	newer[8] = 99
	cases := map[string]struct {
		data []byte
		want error
	}{
		"empty":     {nil, coord.ErrBadBackup},
		"truncated": {good[:len(good)-10], coord.ErrBadBackup},
		"half":      {good[:len(good)/2], coord.ErrBadBackup},
		"corrupt":   {flipped, coord.ErrBadBackup},
		"not one":   {bytes.Repeat([]byte("x"), 100), coord.ErrBadBackup},
		"newer":     {newer, coord.ErrBackupVersion},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			err := coord.Restore(dir, bytes.NewReader(tc.data), coord.RestoreOptions{Name: "n0"})
			require.ErrorIs(t, err, tc.want)
			require.NoDirExists(t, dir, "a refused backup writes nothing")
		})
	}
	require.NoError(t, coord.Restore(filepath.Join(t.TempDir(), "data"), bytes.NewReader(good),
		coord.RestoreOptions{Name: "n0"}))
}
