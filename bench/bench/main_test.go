package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/coordcell"
	"github.com/coordcell/coord/bench/internal/etcdcell"
	"github.com/coordcell/coord/bench/internal/frontcell"
)

// TestMain lets the test binary serve as the bench's child: the parent
// re-executes os.Executable(), which under go test is this binary.
func TestMain(m *testing.M) {
	if slices.ContainsFunc(os.Args[1:], func(a string) bool {
		return a == "-"+childFlag || strings.HasPrefix(a, "-"+childFlag+"=") || a == "-"+memberFlag
	}) {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestRun runs the program end to end on a tiny put scenario in two
// interleaved rounds: four child processes (coord, etcd, coord, etcd),
// the table, the JSON file.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-scenario", "put", "-duration", "200ms", "-warmup", "50ms", "-clients", "1,2",
		"-rounds", "2", "-dir", dir, "-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "coord/etcd") || !strings.Contains(stdout.String(), "median over 2 rounds") {
		t.Errorf("no table in the output:\n%s", stdout.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Children) != 4 || res.Rounds != 2 {
		t.Fatalf("%d children in %d rounds, want 4 in 2", len(res.Children), res.Rounds)
	}
	var order []string
	for _, ch := range res.Children {
		order = append(order, fmt.Sprintf("%s%d", ch.Side, ch.Round))
	}
	if !slices.Equal(order, []string{"coord1", "etcd1", "coord2", "etcd2"}) {
		t.Errorf("children ran in the order %v, want the sides interleaved", order)
	}
	for _, ch := range res.Children {
		if ch.Error != "" || ch.CPUSeconds <= 0 || ch.PeakRSS <= 0 || len(ch.Metrics) == 0 {
			t.Errorf("child %s %s: %+v", ch.Side, ch.Scenario, ch)
		}
	}
	found := map[string]bool{}
	for _, r := range res.Rows {
		found[r.Name] = true
		if r.Name == "put.c2.rate" && (r.Coord == nil || r.Etcd == nil || r.Ratio == nil || r.Pairs != 2 || r.RatioMin == nil) {
			t.Errorf("row %s lacks a side, the ratio or its range: %+v", r.Name, r)
		}
	}
	for _, n := range []string{"put.c1.rate", "put.c2.p99", "put.child_cpu", "put.child_rss", "rss.peak"} {
		if !found[n] {
			t.Errorf("no row %s", n)
		}
	}
}

func TestFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.scenarios, []string{"put", "get", "lock", "sessions", "sessions-large", "failover", "inflight", "watch",
		"clients-sessions", "clients-watch", "client-put", "client-lock", "client-get", "etcd-put", "etcd-get", "etcd-lock"}) {
		t.Errorf("default scenarios %v", o.scenarios)
	}
	if c := o.cfg; c.InflightWriters != 128 || c.InflightCells != 3 || !slices.Equal(c.InflightStops, []cell.StopMode{cell.Crash, cell.Graceful}) {
		t.Errorf("inflight defaults: %d writers, %d cells, stops %v", c.InflightWriters, c.InflightCells, c.InflightStops)
	}
	if o, err := parseFlags([]string{"-inflight-stop", "graceful"}, &stderr); err != nil || !slices.Equal(o.cfg.InflightStops, []cell.StopMode{cell.Graceful}) {
		t.Errorf("-inflight-stop graceful: %v %v", o.cfg.InflightStops, err)
	}
	if o.cfg.EtcdPinned {
		t.Error("etcd-* clients pinned to one member by default, want clientv3's spread")
	}
	if o, err := parseFlags([]string{"-scenario", "etcd-lock", "-etcd-pinned"}, &stderr); err != nil || !o.cfg.EtcdPinned {
		t.Errorf("-etcd-pinned: %v", err)
	}
	if o.rounds != 3 {
		t.Errorf("%d rounds by default, want 3", o.rounds)
	}
	if !slices.Equal(o.cfg.PutClients, []int{1, 16, 64}) || o.cfg.Sessions != 10_000 || o.cfg.SessionsLarge != 100_000 {
		t.Errorf("defaults: %+v", o.cfg)
	}
	// Issue 15's sizes: 100 clients x 1,000 sessions, 100 clients x 100
	// watchers, puts at 16 and 64 callers.
	if c := o.cfg; c.Clients != 100 || c.ClientSessions != 1000 || c.ClientWatchers != 100 || !slices.Equal(c.ClientCallers, []int{16, 64}) {
		t.Errorf("client defaults: %+v", o.cfg)
	}
	if o, err = parseFlags([]string{"-sessions-large", "0"}, &stderr); err != nil || slices.Contains(o.scenarios, "sessions-large") {
		t.Errorf("-sessions-large 0 still runs it: %v %v", o.scenarios, err)
	}
	for _, bad := range [][]string{{"-scenario", "nope"}, {"-sides", "zookeeper"}, {"-clients", "0"},
		{"-failover-stop", "kill"}, {"-etcd-client", "http"}, {"-watchers", "0"}, {"-client-count", "0"}, {"-client-callers", "16,x"}, {"-rounds", "0"}, {"-inflight-stop", "crash,kill"}, {"-inflight-writers", "0"}, {"extra"}} {
		if _, err := parseFlags(bad, &stderr); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if o, err := parseFlags([]string{"-shape", "procs"}, &stderr); err != nil || !slices.Equal(o.scenarios, []string{"put", "get", "lock", "sessions", "inflight"}) {
		t.Errorf("-shape procs runs %v (%v), want put, get, lock, sessions, inflight", o.scenarios, err)
	}
	// The scale run only when named; its sizes parsed.
	if o, err := parseFlags(nil, &stderr); err != nil || slices.Contains(o.scenarios, "scale") {
		t.Errorf("all runs %v (%v): scale only when named", o.scenarios, err)
	}
	if o, err := parseFlags([]string{"-scenario", "scale", "-scale-quota", "64MiB", "-scale-gomemlimit", "1300MiB"}, &stderr); err != nil ||
		o.scale.quotaBytes != 64<<20 || o.scale.cap() != 64<<20 || o.scale.Keys != 1_000_000 {
		t.Errorf("scale flags: %+v (%v)", o.scale, err)
	} else if l, on, _ := o.scale.memLimit(1 << 30); !on || l != 1300<<20 {
		t.Errorf("-scale-gomemlimit 1300MiB: %d %v", l, on)
	}
	if o, _ := parseFlags([]string{"-scale-gomemlimit", "1.5x"}, &stderr); o != nil {
		if l, on, _ := o.scale.memLimit(1000); !on || l != 1500 {
			t.Errorf("-scale-gomemlimit 1.5x of 1000 bytes: %d %v", l, on)
		}
	}
	for _, bad := range [][]string{{"-shape", "procs", "-scenario", "watch"}, {"-shape", "cloud"}, {"-soak", "-1s"}, {"-soak-keys", "0"},
		{"-scale-quota", "lots"}, {"-scale-gomemlimit", "-2x"}, {"-scale-batch", "200"}, {"-scale-keys", "0"}, {"-scale-mem-floor", "x"}} {
		if _, err := parseFlags(bad, &stderr); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	stderr.Reset()
	parseFlags([]string{"-h"}, &stderr)
	if strings.Contains(stderr.String(), "-"+childFlag) {
		t.Errorf("the usage shows the hidden flag:\n%s", stderr.String())
	}
}

// The etcd-* scenarios' coord side is the cell behind etcdapi; every
// other scenario's is the plain cell, and etcd's is etcd whatever the
// scenario.
func TestOpener(t *testing.T) {
	ptr := func(o cell.Opener) uintptr { return reflect.ValueOf(o).Pointer() }
	for _, c := range []struct {
		side  string
		front bool
		want  cell.Opener
	}{{"coord", true, frontcell.Open}, {"coord", false, coordcell.Open}} {
		got, err := opener(c.side, etcdcell.InProcess, c.front)
		if err != nil || ptr(got) != ptr(c.want) {
			t.Errorf("opener(%s, front %v): %v, not the cell wanted", c.side, c.front, err)
		}
	}
	for _, front := range []bool{false, true} {
		if got, err := opener("etcd", etcdcell.GRPC, front); err != nil || ptr(got) == ptr(frontcell.Open) || ptr(got) == ptr(coordcell.Open) {
			t.Errorf("opener(etcd, front %v): %v, not etcd's", front, err)
		}
	}
	if _, err := opener("zookeeper", etcdcell.InProcess, true); err == nil {
		t.Error("an unknown side has an opener")
	}
}
