package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/stretchr/testify/require"
)

// member is one OS process of the cell.
type member struct {
	name, addr, http, data string
	cmd                    *exec.Cmd
}

// TestMultiProcessLeaderKill runs a 3-process cell over TCP on loopback
// with data on disk, writes continuously, kills the leader with SIGKILL,
// restarts it, and checks that every acknowledged write is on every member.
func TestMultiProcessLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs OS processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kv")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	members := make([]*member, 3)
	var peers []string
	for i := range members {
		addr, err := freePort()
		require.NoError(t, err)
		httpAddr, err := freePort()
		require.NoError(t, err)
		m := &member{name: fmt.Sprintf("m%d", i), addr: addr, http: httpAddr, data: filepath.Join(dir, fmt.Sprintf("m%d", i))}
		members[i] = m
		peers = append(peers, m.name+"="+m.addr)
	}
	start := func(m *member) {
		m.cmd = exec.Command(bin, "-name", m.name, "-addr", m.addr, "-http", m.http,
			"-peers", strings.Join(peers, ","), "-data", m.data)
		m.cmd.Stdout, m.cmd.Stderr = io.Discard, os.Stderr
		require.NoError(t, m.cmd.Start())
	}
	for _, m := range members {
		start(m)
	}
	t.Cleanup(func() {
		for _, m := range members {
			if m.cmd != nil && m.cmd.ProcessState == nil {
				m.cmd.Process.Kill()
				m.cmd.Wait()
			}
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	leader := func() int {
		for i, m := range members {
			resp, err := client.Get("http://" + m.http + "/status")
			if err != nil {
				continue
			}
			var st coord.Status
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.Role == coord.RoleLeader {
				return i
			}
		}
		return -1
	}
	require.Eventually(t, func() bool { return leader() >= 0 }, 30*time.Second, 50*time.Millisecond)

	// Writers: each writes its own keys through a different member and
	// remembers what was acknowledged.
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				key := fmt.Sprintf("w%d-%05d", w, seq)
				req, _ := http.NewRequest(http.MethodPut, "http://"+members[(w+seq)%3].http+"/kv/"+key, strings.NewReader(key))
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					mu.Lock()
					acked[key] = true
					mu.Unlock()
				}
			}
		}()
	}
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	require.Eventually(t, func() bool { return ackedCount() >= 50 }, 30*time.Second, 20*time.Millisecond)

	victim := leader()
	require.GreaterOrEqual(t, victim, 0)
	t.Logf("SIGKILL leader %s after %d acknowledged writes", members[victim].name, ackedCount())
	require.NoError(t, members[victim].cmd.Process.Signal(syscall.SIGKILL))
	members[victim].cmd.Wait()
	before := ackedCount()
	require.Eventually(t, func() bool { return ackedCount() >= before+50 }, 30*time.Second, 20*time.Millisecond,
		"writes continue on the two survivors")
	start(members[victim])
	after := ackedCount()
	require.Eventually(t, func() bool { return ackedCount() >= after+50 }, 30*time.Second, 20*time.Millisecond)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d acknowledged writes; checking each on every member", len(acked))
	for _, m := range members {
		require.Eventually(t, func() bool {
			for key := range acked {
				resp, err := client.Get("http://" + m.http + "/kv/" + key + "?serializable=1")
				if err != nil {
					return false
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(body) != key {
					return false
				}
			}
			return true
		}, 30*time.Second, 100*time.Millisecond, "member %s is missing an acknowledged write", m.name)
	}
	for _, m := range members {
		require.NoError(t, m.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, m.cmd.Wait())
	}
}
