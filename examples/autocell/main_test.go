package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// freePorts returns n distinct free loopback addresses: every listener
// stays open until all are chosen, so the kernel cannot hand one port
// out twice.
func freePorts(t *testing.T, n int) []string {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

var removed = regexp.MustCompile(`^\w+: member (\w+): removed`)

// TestFormAndReplace runs 4 copies from one seed address: they form a
// cell (3 founders, 1 standby), and when a voter is killed with SIGKILL
// the others print its removal.
func TestFormAndReplace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs 4 processes")
	}
	// Each runs its own processes on ports of its own, and mostly
	// waits on their timers: side by side they share the wall clock.
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "autocell")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c", "d"}
	gossip, raft := map[string]string{}, map[string]string{}
	ports := freePorts(t, 2*len(names))
	for i, n := range names {
		gossip[n], raft[n] = ports[2*i], ports[2*i+1]
	}
	lines := make(chan string, 1024)
	procs := map[string]*exec.Cmd{}
	var wg sync.WaitGroup
	for i, n := range names {
		cmd := exec.Command(bin, "-name", n, "-addr", raft[n], "-gossip", gossip[n],
			"-seed", gossip["a"], "-zone", fmt.Sprintf("z%d", i%3), "-fast")
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
			s := bufio.NewScanner(out)
			for s.Scan() {
				t.Log(s.Text())
				select {
				case lines <- s.Text():
				default:
				}
			}
		}()
	}
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			p.Wait()
		}
		wg.Wait()
	}()
	timeout := time.After(90 * time.Second)
	inCell := map[string]bool{}
	for len(inCell) < 4 {
		select {
		case l := <-lines:
			if n, ok := strings.CutSuffix(l, ": in the cell"); ok {
				inCell[n] = true
			}
		case <-timeout:
			t.Fatalf("copies in the cell: %v", inCell)
		}
	}
	// The founders are the 3 lowest names; kill one that is not "d".
	victim := "b"
	procs[victim].Process.Kill()
	procs[victim].Wait()
	delete(procs, victim)
	for {
		select {
		case l := <-lines:
			if m := removed.FindStringSubmatch(l); m != nil && m[1] == victim {
				return
			}
		case <-timeout:
			t.Fatalf("no copy reported %s removed", victim)
		}
	}
}
