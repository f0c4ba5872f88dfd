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
	// Each runs its own processes on ports of its own, and mostly
	// waits on their timers: side by side they share the wall clock.
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "kv")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	members := make([]*member, 3)
	var peers []string
	addrs, err := freePorts(2 * len(members))
	require.NoError(t, err)
	for i := range members {
		addr, httpAddr := addrs[2*i], addrs[2*i+1]
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

// cell is a 3-process cell over TCP, for the tests below.
type cell struct {
	t       *testing.T
	members []*member
	client  *http.Client
}

// startCell builds the example and starts three members; cleanup kills
// whatever is still running.
// cellTick is the Raft tick of startCell's members: 400 ms election
// timeouts and a shortest session TTL of 1.6 s, so that the pauses and
// expiries the tests wait out take a third of the default's time.
const cellTick = 40 * time.Millisecond

func startCell(t *testing.T) *cell {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kv")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	c := &cell{t: t, members: make([]*member, 3), client: &http.Client{Timeout: 2 * time.Second}}
	var peers []string
	addrs, err := freePorts(2 * len(c.members))
	require.NoError(t, err)
	for i := range c.members {
		addr, httpAddr := addrs[2*i], addrs[2*i+1]
		c.members[i] = &member{name: fmt.Sprintf("m%d", i), addr: addr, http: httpAddr, data: filepath.Join(dir, fmt.Sprintf("m%d", i))}
		peers = append(peers, c.members[i].name+"="+addr)
	}
	for _, m := range c.members {
		m.cmd = exec.Command(bin, "-name", m.name, "-addr", m.addr, "-http", m.http,
			"-peers", strings.Join(peers, ","), "-data", m.data, "-tick", cellTick.String())
		m.cmd.Stdout, m.cmd.Stderr = io.Discard, os.Stderr
		require.NoError(t, m.cmd.Start())
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			if m.cmd.ProcessState == nil {
				m.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die of SIGKILL until continued on some systems
				m.cmd.Process.Kill()
				m.cmd.Wait()
			}
		}
	})
	return c
}

// leader returns the index of the member that says it leads, or -1.
func (c *cell) leader() int {
	for i, m := range c.members {
		resp, err := c.client.Get("http://" + m.http + "/status")
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

// newSession opens a session held by member i.
func (c *cell) newSession(i int) int64 {
	resp, err := c.client.Post("http://"+c.members[i].http+"/sessions", "", nil)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	var st SessionState
	require.NoError(c.t, json.NewDecoder(resp.Body).Decode(&st))
	return st.ID
}

// session reports session id's state on member i.
func (c *cell) session(i int, id int64) SessionState {
	resp, err := c.client.Get(fmt.Sprintf("http://%s/sessions/%d", c.members[i].http, id))
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	var st SessionState
	require.NoError(c.t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// TestMultiProcessLeaderPause freezes the Raft leader's process with
// SIGSTOP for longer than the session TTL, then continues it. Sessions
// held on the other members, kept alive by the new leader meanwhile,
// must not end: the woken leader's expiries, decided from its stale
// deadline table, carry its old term and are refused. The paused
// member's own sessions end, and their holder sees jeopardy first.
func TestMultiProcessLeaderPause(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs OS processes")
	}
	// Each runs its own processes on ports of its own, and mostly
	// waits on their timers: side by side they share the wall clock.
	t.Parallel()
	c := startCell(t)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 30*time.Second, 50*time.Millisecond)
	const ttl = 40 * cellTick // MinSessionTTL: four election timeouts
	for round := range 2 {
		var victim int
		require.Eventually(t, func() bool { victim = c.leader(); return victim >= 0 }, 30*time.Second, 50*time.Millisecond)
		type held struct {
			member int
			id     int64
		}
		var others, own []held
		for i := range c.members {
			for range 2 {
				h := held{i, c.newSession(i)}
				if i == victim {
					own = append(own, h)
				} else {
					others = append(others, h)
				}
			}
		}
		p := c.members[victim].cmd.Process
		t.Logf("round %d: SIGSTOP leader %s", round, c.members[victim].name)
		require.NoError(t, p.Signal(syscall.SIGSTOP))
		stopped := time.Now()
		for time.Since(stopped) < ttl+30*cellTick { // the TTL and three election timeouts
			for _, h := range others {
				require.False(t, c.session(h.member, h.id).Ended, "round %d: session %d on %s ended while the leader was stopped", round, h.id, c.members[h.member].name)
			}
			time.Sleep(200 * time.Millisecond) // the pause is a fixed span by design: longer than the TTL
		}
		require.NoError(t, p.Signal(syscall.SIGCONT))
		t.Logf("round %d: SIGCONT %s after %v", round, c.members[victim].name, time.Since(stopped).Round(time.Millisecond))
		// The woken member's sessions end, with jeopardy first.
		for _, h := range own {
			require.Eventually(t, func() bool { return c.session(h.member, h.id).Ended }, 20*time.Second, 50*time.Millisecond,
				"round %d: the paused member's session %d never ended", round, h.id)
			st := c.session(h.member, h.id)
			require.True(t, st.Warned, "round %d: session %d ended without jeopardy first", round, h.id)
			require.Contains(t, st.Err, "expired")
		}
		// A TTL after the wake, the other members' sessions still live.
		woke := time.Now()
		for time.Since(woke) < ttl {
			for _, h := range others {
				st := c.session(h.member, h.id)
				require.False(t, st.Ended, "round %d: session %d on %s ended after the old leader woke: %s", round, h.id, c.members[h.member].name, st.Err)
			}
			time.Sleep(100 * time.Millisecond) // sampling over the window after the wake
		}
	}
	for _, m := range c.members {
		require.NoError(t, m.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, m.cmd.Wait())
	}
}

// TestMultiProcessLocks takes a lock over HTTP on one member, sees a
// session on another member wait for it, and get it with a greater
// fencing token once it is released.
func TestMultiProcessLocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs OS processes")
	}
	// Each runs its own processes on ports of its own, and mostly
	// waits on their timers: side by side they share the wall clock.
	t.Parallel()
	c := startCell(t)
	require.Eventually(t, func() bool { return c.leader() >= 0 }, 30*time.Second, 50*time.Millisecond)
	a, b := c.newSession(0), c.newSession(1)
	slow := &http.Client{Timeout: 30 * time.Second} // a lock request waits up to its ?wait=
	lock := func(member int, id int64, wait string) (LockState, int) {
		resp, err := slow.Post(fmt.Sprintf("http://%s/sessions/%d/locks/printer?wait=%s", c.members[member].http, id, wait), "", nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		var st LockState
		if resp.StatusCode == http.StatusOK {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		}
		return st, resp.StatusCode
	}
	first, code := lock(0, a, "5s")
	require.Equal(t, http.StatusOK, code)
	_, code = lock(1, b, "300ms")
	require.Equal(t, http.StatusRequestTimeout, code, "a second session got a held lock")

	req, err := http.NewRequest(http.MethodDelete, fmt.Sprintf("http://%s/sessions/%d/locks/printer", c.members[0].http, a), nil)
	require.NoError(t, err)
	resp, err := slow.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	second, code := lock(1, b, "10s")
	require.Equal(t, http.StatusOK, code)
	require.Greater(t, second.Token, first.Token, "fencing tokens grow from holder to holder")

	// A lock-delay past coord.MaxLockDelay is refused as bad input.
	_, code = lock(2, c.newSession(2), "1s&delay=2m")
	require.Equal(t, http.StatusBadRequest, code)
}
