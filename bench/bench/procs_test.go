package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRunProcs runs -shape procs end to end on a tiny put scenario: on
// each side three member processes, the table with each process's CPU
// and peak RSS and their sums, the JSON file.
func TestRunProcs(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-shape", "procs", "-scenario", "put", "-duration", "200ms", "-warmup", "50ms", "-clients", "1,4",
		"-rounds", "1", "-dir", dir, "-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Children) != 2 || res.Shape != shapeProcs {
		t.Fatalf("%d children, shape %q", len(res.Children), res.Shape)
	}
	for _, ch := range res.Children {
		if ch.Error != "" || ch.Scenario != "put@procs" || len(ch.Processes) != 3 || len(ch.Metrics) == 0 {
			t.Fatalf("child %s %s: %+v", ch.Side, ch.Scenario, ch)
		}
		var sum float64
		for i, p := range ch.Processes {
			if p.CPUSeconds <= 0 || p.PeakRSS <= 0 {
				t.Errorf("%s process %d: %+v", ch.Side, i, p)
			}
			sum += p.CPUSeconds
		}
		if ch.CPUSeconds != sum {
			t.Errorf("%s: CPU %v, processes sum to %v", ch.Side, ch.CPUSeconds, sum)
		}
	}
	var names []string
	for _, r := range res.Rows {
		names = append(names, r.Name)
		if r.Name == "put.c4.rate" && (r.Coord == nil || r.Etcd == nil || *r.Coord <= 0) {
			t.Errorf("row %s: %+v", r.Name, r)
		}
	}
	for _, n := range []string{"put.c1.rate", "put.c4.p99", "put.c4.cpu_us", "put.c4.cpu_us.leader", "put@procs.proc0_cpu",
		"put@procs.proc2_rss", "put@procs.child_cpu"} {
		if !slices.Contains(names, n) {
			t.Errorf("no row %s in %v", n, names)
		}
	}
	if !strings.Contains(stdout.String(), "member processes: CPU time, sum") {
		t.Errorf("no sums in the table:\n%s", stdout.String())
	}
}

// TestRunProcsKeepAlive runs the sessions scenario with one member per
// process on both sides: each process's CPU over an idle window, then
// over a window with its sessions kept alive, as CPU per session per
// second and per keep-alive interval.
func TestRunProcsKeepAlive(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-shape", "procs", "-scenario", "sessions", "-sessions", "30", "-duration", "300ms", "-keepalive", "1s",
		"-rounds", "1", "-dir", dir, "-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Children) != 2 {
		t.Fatalf("%d children", len(res.Children))
	}
	for _, ch := range res.Children {
		if ch.Error != "" || ch.Scenario != "sessions@procs" || len(ch.Processes) != 3 {
			t.Fatalf("child %s %s: %+v", ch.Side, ch.Scenario, ch)
		}
		got := map[string]float64{}
		for _, m := range ch.Metrics {
			got[m.Name] = m.Value
		}
		if got["sessions.keepalive.created"] != 30 || got["sessions.keepalive.cores"] <= 0 {
			t.Errorf("%s: %v", ch.Side, got)
		}
		for _, n := range []string{"sessions.keepalive.us_per_s", "sessions.keepalive.us_per_interval", "sessions.keepalive.idle_cores"} {
			if _, ok := got[n]; !ok {
				t.Errorf("%s: no figure %s", ch.Side, n)
			}
		}
	}
}

// TestRunProcsInflight runs the inflight scenario with one member per
// process on both sides, both stops, one cell each: the leader's process
// is killed (crash) or its member closed (graceful), and the writes in
// flight on the two survivors' processes are each timed to their result.
func TestRunProcsInflight(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-shape", "procs", "-scenario", "inflight", "-inflight-writers", "8", "-inflight-cells", "1",
		"-warmup", "100ms", "-rounds", "1", "-dir", dir, "-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Children) != 2 {
		t.Fatalf("%d children", len(res.Children))
	}
	for _, ch := range res.Children {
		if ch.Error != "" || ch.Scenario != "inflight@procs" || len(ch.Processes) != 3 || ch.CPUSeconds <= 0 {
			t.Fatalf("child %s %s: %+v", ch.Side, ch.Scenario, ch)
		}
		got := map[string]float64{}
		for _, m := range ch.Metrics {
			got[m.Name] = m.Value
		}
		for _, mode := range []string{"crash", "graceful"} {
			m := "inflight." + mode
			if got[m+".writes"] < 1 || got[m+".p99"] <= 0 || got[m+".failover.write"] <= 0 || got[m+".errors.bench-limit"] != 0 {
				t.Errorf("%s %s: %v", ch.Side, mode, got)
			}
			t.Logf("%s %s: %v in flight, p99 %.1f ms, %v errors, first write %.1f ms, new leader %.1f ms", ch.Side, mode,
				got[m+".writes"], got[m+".p99"], got[m+".errors"], got[m+".failover.write"], got[m+".failover.leader"])
		}
	}
	if !strings.Contains(stdout.String(), "3 procs") {
		t.Errorf("no procs labels in the table:\n%s", stdout.String())
	}
}

// TestRunClientAttacks runs client-attacks end to end at its small
// sizes: three coord member processes, every attack reported with each
// member's figures and the controls' gaps, and nothing failed.
func TestRunClientAttacks(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-scenario", "client-attacks", "-attack-size", "small", "-dir", dir, "-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Children) != 1 || res.Attacks == nil {
		t.Fatalf("%d children (want coord's alone, once), attack sizes %v", len(res.Children), res.Attacks)
	}
	ch := res.Children[0]
	if ch.Error != "" || ch.Side != "coord" || ch.Scenario != "client-attacks@procs" || len(ch.Processes) != 3 {
		t.Fatalf("child: %+v", ch)
	}
	got := map[string]float64{}
	for _, m := range ch.Metrics {
		got[m.Name] = m.Value
	}
	for _, n := range []string{"attacks.idle.m0.rss", "attacks.idle.log_entries", "attacks.conn-flood.m2.heap_delta",
		"attacks.conn-flood.probe_other.ok", "attacks.unread-watches.gap.victim", "attacks.prefix-reads.victim.heap_peak",
		"attacks.keepalive-frames.closed", "attacks.read-txn.txns.read-too-large", "attacks.sessions.create.ok",
		"attacks.sessions.gap.other", "attacks.close-stuck.close"} {
		if _, ok := got[n]; !ok {
			t.Errorf("no figure %s", n)
		}
	}
	if got["attacks.keepalive-frames.closed"] != 2 || got["attacks.close-stuck.close"] <= 0 {
		t.Errorf("keep-alive frames closed %v, Close %v ms", got["attacks.keepalive-frames.closed"], got["attacks.close-stuck.close"])
	}
}
