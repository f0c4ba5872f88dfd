package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/internal/testmain"
)

// childEnv marks a re-executed test binary as one member of the cell
// TestFiveProcessesLoseTwoVoters runs.
const childEnv = "AUTOCELL_TEST_MEMBER"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(member())
	}
	testmain.Run(m)
}

// member runs one member over real TCP and UDP on loopback. It writes
// keys and prints each acknowledged one ("acked KEY"); on stdin it answers
// "check KEY" ("has KEY" or "missing KEY") and "roles" ("roles
// voter=a,b,c standby=d,e").
func member() int {
	name := os.Getenv(childEnv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	g := &coord.GossipConfig{
		BindAddr: os.Getenv("AUTOCELL_GOSSIP"), Seeds: []string{os.Getenv("AUTOCELL_SEED")},
		BootstrapExpect: 3, ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond,
		Autopilot: coord.AutopilotConfig{Voters: 3, Stabilization: time.Second, DeadThreshold: 2 * time.Second, Interval: 200 * time.Millisecond},
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	n, err := coord.Open(octx, coord.Config{Name: name, Addr: os.Getenv("AUTOCELL_ADDR"), Gossip: g,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	cancel()
	if err != nil {
		fmt.Println("open failed:", err)
		return 1
	}
	defer n.Close()
	var mu sync.Mutex // one writer of stdout lines at a time
	say := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(f+"\n", a...)
	}
	say("ready")
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("w/%s/%06d", name, i)
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := n.Put(wctx, key, []byte("v"))
			cancel()
			if err == nil {
				say("acked %s", key)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(os.Stdin)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	for {
		var line string
		select {
		case <-ctx.Done():
			return 0
		case l, ok := <-lines:
			if !ok {
				return 0
			}
			line = l
		}
		cmd, arg, _ := strings.Cut(line, " ")
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		switch cmd {
		case "check":
			_, err := n.Get(rctx, arg)
			switch {
			case err == nil:
				say("has %s", arg)
			case errors.Is(err, coord.ErrNotFound):
				say("missing %s", arg)
			default:
				say("error %s %v", arg, err)
			}
		case "roles":
			ms, err := n.Admin().Members(rctx)
			if err != nil {
				say("roles error %v", err)
				break
			}
			var voters, standby []string
			for _, m := range ms {
				if m.Role == coord.MemberVoter {
					voters = append(voters, m.Name)
				} else {
					standby = append(standby, m.Name)
				}
			}
			say("roles voter=%s standby=%s decision=%+v", strings.Join(voters, ","), strings.Join(standby, ","), n.Admin().Autopilot())
		}
		cancel()
	}
}

// proc is one member process as the test drives it.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // what it prints but "acked" lines
}

// TestFiveProcessesLoseTwoVoters starts 5 processes, over TCP and UDP on
// loopback, from one seed address (3 voters, 2 standbys), SIGKILLs a
// voter, waits for the autopilot to replace it from a standby, then does
// it again; every write a member acknowledged is still in the cell.
func TestFiveProcessesLoseTwoVoters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 5 processes for about half a minute")
	}
	// Each runs its own processes on ports of its own, and mostly
	// waits on their timers: side by side they share the wall clock.
	t.Parallel()
	names := []string{"a", "b", "c", "d", "e"}
	gossip, raft := map[string]string{}, map[string]string{}
	ports := freePorts(t, 2*len(names))
	for i, n := range names {
		gossip[n], raft[n] = ports[2*i], ports[2*i+1]
	}
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	procs := map[string]*proc{}
	for _, n := range names {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+n, "AUTOCELL_GOSSIP="+gossip[n], "AUTOCELL_SEED="+gossip["a"], "AUTOCELL_ADDR="+raft[n])
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{name: n, cmd: cmd, stdin: in, lines: make(chan string, 64)}
		procs[n] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(p.lines)
			s := bufio.NewScanner(out)
			for s.Scan() {
				if k, ok := strings.CutPrefix(s.Text(), "acked "); ok {
					mu.Lock()
					acked = append(acked, k)
					mu.Unlock()
					continue
				}
				p.lines <- s.Text()
			}
		}()
	}
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.stdin.Close()
		}
		for _, p := range procs {
			p.cmd.Wait()
		}
		wg.Wait()
	}()
	start := time.Now()
	deadline := time.After(2 * time.Minute)
	next := func(p *proc) string {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s exited", p.name)
			}
			return l
		case <-deadline:
			t.Fatalf("timed out waiting for %s", p.name)
		}
		return ""
	}
	for _, n := range names {
		if l := next(procs[n]); l != "ready" {
			t.Fatalf("%s: %s", n, l)
		}
	}
	t.Logf("5 processes in one cell after %v", time.Since(start))
	// roles asks p until the voters are 3, none of them in gone, with
	// standbys standbys.
	roles := func(p *proc, standbys int, gone ...string) []string {
		for {
			fmt.Fprintln(p.stdin, "roles")
			l := next(p)
			if rest, ok := strings.CutPrefix(l, "roles voter="); ok {
				vs, rest, _ := strings.Cut(rest, " standby=")
				ss, _, _ := strings.Cut(rest, " ")
				voters := strings.Split(vs, ",")
				if len(voters) == 3 && len(strings.FieldsFunc(ss, func(r rune) bool { return r == ',' })) == standbys && !slices.ContainsFunc(voters, func(v string) bool { return slices.Contains(gone, v) }) {
					t.Logf("%s: %s", p.name, l)
					return voters
				}
			}
			time.Sleep(200 * time.Millisecond) // asking a process for its view again
		}
	}
	voters := roles(procs["a"], 2)
	var killed []string
	for kill := range 2 {
		victim := voters[0]
		var ask *proc
		for _, n := range names {
			if !slices.Contains(voters, n) && !slices.Contains(killed, n) {
				ask = procs[n] // a standby: it survives this kill
				break
			}
		}
		t.Logf("SIGKILL voter %s", victim)
		procs[victim].cmd.Process.Kill()
		procs[victim].cmd.Wait()
		delete(procs, victim)
		killed = append(killed, victim)
		at := time.Now()
		voters = roles(ask, 1-kill, killed...)
		t.Logf("voter %s replaced after %v: voters %v", victim, time.Since(at), voters)
	}
	mu.Lock()
	keys := slices.Clone(acked)
	mu.Unlock()
	var check *proc
	for _, p := range procs {
		check = p
		break
	}
	missing := 0
	for _, k := range keys {
		fmt.Fprintln(check.stdin, "check "+k)
		if l := next(check); l != "has "+k {
			missing++
			t.Errorf("acknowledged %s: %s", k, l)
		}
	}
	t.Logf("%d acknowledged writes checked on %s, %d missing", len(keys), check.name, missing)
	for _, n := range names {
		if p, ok := procs[n]; ok {
			fmt.Fprintln(p.stdin, "roles")
			t.Logf("%s: %s", n, next(p)) // the leader's line has the autopilot's last decision
		}
	}
}
