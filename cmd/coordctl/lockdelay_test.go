package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestCoordctlLocksShowsLockDelay: a lock whose holder's session expired
// with a lock-delay shows in `coordctl locks` as in lock-delay with no
// holder, its waiter as "waiter 1", in the table and in --json.
func TestCoordctlLocksShowsLockDelay(t *testing.T) {
	c := coordtest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := c.LeaderIndex()
	h := (leader + 1) % 3
	hn := c.Node(h)
	hs, err := hn.NewSession(ctx, coord.WithTTL(hn.MinSessionTTL()))
	require.NoError(t, err)
	_, err = coord.NewMutex(hs, "db", coord.WithLockDelay(coord.MaxLockDelay)).Lock(ctx)
	require.NoError(t, err)
	c.Isolate(h)
	n := c.Node(leader)
	var marker coord.KV
	require.Eventually(t, func() bool {
		kvs, _, err := n.List(ctx, "locks/db/", coord.Serializable())
		require.NoError(t, err)
		for _, kv := range kvs {
			if strings.HasPrefix(kv.Key, "locks/db/d") {
				marker = kv
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "the holder's session expires and the cell writes the marker")
	c.Heal()
	ws, err := n.NewSession(ctx)
	require.NoError(t, err)
	waitCtx, stop := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := coord.NewMutex(ws, "db").Lock(waitCtx)
		waited <- err
	}()
	defer func() {
		stop()
		require.ErrorIs(t, <-waited, context.Canceled)
	}()

	srv := httptest.NewServer(n.Handler(coord.WithAdmin("tok")))
	defer srv.Close()
	ctl := func(args ...string) string {
		var out, errOut bytes.Buffer
		require.NoError(t, run(ctx, append([]string{"--endpoint", srv.URL, "--token", "tok"}, args...), &out, &errOut), errOut.String())
		return out.String()
	}
	var locks []coord.LockReport
	require.Eventually(t, func() bool {
		locks = nil
		require.NoError(t, json.Unmarshal([]byte(ctl("--json", "locks")), &locks))
		return len(locks) == 1 && len(locks[0].Queue) == 1
	}, 30*time.Second, 10*time.Millisecond, "the waiter queues behind the marker")
	l := locks[0]
	require.False(t, l.Held)
	require.NotNil(t, l.LockDelay)
	require.Equal(t, coord.LockDelayReport{Key: marker.Key, Delay: coord.MaxLockDelay, Revision: marker.CreateRev}, *l.LockDelay)
	require.Equal(t, ws.ID(), l.Queue[0].Session)

	out := ctl("locks")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, "header, marker, waiter:\n%s", out)
	require.Regexp(t, `^db\s*\|lock-delay 1m0s from rev `+strconv.FormatInt(marker.CreateRev, 10)+`, no holder\s*\|`, lines[1])
	require.Contains(t, lines[1], marker.Key)
	require.Regexp(t, `^db\s*\|waiter 1\s*\|`+regexp.QuoteMeta(strconv.FormatInt(int64(ws.ID()), 10)), lines[2])
	require.NotRegexp(t, `\|holder\s*\|`, out, "no row is the holder")
}
