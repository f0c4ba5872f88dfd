package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var leads = regexp.MustCompile(`^(\w+): I am the leader \(fencing token (\d+)\)`)

// TestKillTheLeaderProcess runs three OS processes over TCP, kills the
// leader with SIGKILL, and expects another to lead with a greater token.
func TestKillTheLeaderProcess(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "le")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c"}
	var peers []string
	addrs := map[string]string{}
	// Every listener stays open until all ports are chosen, so the
	// kernel cannot hand the same free port out twice.
	var held []net.Listener
	for _, n := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		addrs[n] = l.Addr().String()
		peers = append(peers, n+"="+addrs[n])
	}
	for _, l := range held {
		l.Close()
	}
	type leadership struct {
		name  string
		token int
	}
	events := make(chan leadership, 16)
	procs := map[string]*exec.Cmd{}
	var wg sync.WaitGroup
	for _, n := range names {
		cmd := exec.Command(bin, "-name", n, "-addr", addrs[n], "-peers", strings.Join(peers, ","),
			// 40 ms ticks: 400 ms elections and the shortest TTL, 1.6 s,
			// a dead leader's office passes on in a third of the time.
			"-data", filepath.Join(dir, n), "-ttl", "1.6s", "-tick", "40ms")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[n] = cmd
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if m := leads.FindStringSubmatch(sc.Text()); m != nil {
					tok, _ := strconv.Atoi(m[2])
					events <- leadership{m[1], tok}
				}
			}
		}()
	}
	defer func() {
		for _, p := range procs {
			if p.ProcessState == nil {
				p.Process.Kill()
				p.Wait()
			}
		}
		wg.Wait()
	}()
	next := func() leadership {
		select {
		case l := <-events:
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("nobody became leader")
			return leadership{}
		}
	}
	first := next()
	t.Logf("%s leads with token %d; killing it", first.name, first.token)
	if err := procs[first.name].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	procs[first.name].Wait()
	killed := time.Now()
	second := next()
	t.Logf("%s leads with token %d, %v after the kill", second.name, second.token, time.Since(killed).Round(time.Millisecond))
	if second.name == first.name || second.token <= first.token {
		t.Fatalf("expected a new leader with a greater token, got %+v after %+v", second, first)
	}
	// Both survivors stop at once, and must exit on their own (a member
	// that hung at shutdown, waiting on a cell without quorum, was a bug).
	exited := make(chan string, len(names))
	for _, n := range names {
		if n != first.name {
			procs[n].Process.Signal(syscall.SIGTERM)
			go func() {
				procs[n].Wait()
				exited <- n
			}()
		}
	}
	for range len(names) - 1 {
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			t.Fatal("a member did not exit within 60s of SIGTERM")
		}
	}
}
