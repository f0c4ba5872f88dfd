package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordcell/coord/bench/internal/report"
)

// TestRunScale runs the scale scenario end to end at a smoke size on
// both sides: 2,000 keys of 1 KB, a cap of 8 MiB, a few sessions and
// watches through clients. It checks the report's shape (each phase's
// figures on both sides, the targets judged) and the quota: at the cap
// every new write is refused with the quota's error, every delete works,
// and a linearizable get is served.
func TestRunScale(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-scenario", "scale", "-rounds", "3", "-scale-keys", "2000", "-scale-quota", "8MiB",
		"-scale-list", "1000", "-scale-list-page", "100", "-scale-watch-back", "300", "-scale-sessions", "60",
		"-scale-watches", "300", "-scale-clients", "6", "-scale-hold", "500ms", "-scale-settle", "30s", "-session-ttl", "4s",
		"-duration", "200ms", "-warmup", "50ms", "-dir", dir, "-out", out}, &stdout, &stderr)
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
	if len(res.Children) != 2 || res.Scale == nil || res.Scale.Keys != 2000 {
		t.Fatalf("%d children (want one per side: the scenario runs once), scale %+v", len(res.Children), res.Scale)
	}
	for _, ch := range res.Children {
		if ch.Error != "" || ch.Scenario != "scale@procs" || len(ch.Processes) < 3 {
			t.Fatalf("child %s: %s, %d processes", ch.Side, ch.Error, len(ch.Processes))
		}
		got := map[string]float64{}
		for _, m := range ch.Metrics {
			got[m.Name] = m.Value
		}
		for _, n := range []string{"scale.live_data", "scale.load.rate", "scale.empty.put.p99", "scale.loaded.put.p99",
			"scale.loaded.put.cpu_us", "scale.put.p99_loaded_over_empty", "scale.settle.seconds", "scale.settled.put.p99",
			"scale.put.p99_settled_over_empty", "scale.rest.m0.rss", "scale.rest.m2.data_dir",
			"scale.loaded.rss_ratio.max", "scale.memlimit.rss_ratio.max", "scale.list.seconds", "scale.list.heap_peak",
			"scale.watch.seconds", "scale.restart.serving", "scale.restart.open", "scale.join.seconds", "scale.join.mbps",
			"scale.hold.sessions", "scale.hold.watches", "scale.hold.expired_created", "scale.hold.expired_clients", "scale.hold.m0.cores", "scale.quota.grown", "scale.cap.m1.rss"} {
			if _, ok := got[n]; !ok {
				t.Errorf("%s: no figure %s", ch.Side, n)
			}
		}
		if got["scale.live_data"] < 1.9 || got["scale.list.seconds"] <= 0 || got["scale.restart.serving"] <= 0 ||
			got["scale.watch.events"] != 300 || got["scale.hold.sessions"] != 60 || got["scale.hold.watches"] != 300 ||
			got["scale.hold.probes"] != 100 || got["scale.hold.expired"] != 0 || got["scale.hold.expired_clients"] != 0 {
			t.Errorf("%s: live %v MB, list %v s, restart %v s, watch events %v, sessions %v, watches %v, probes %v, expired %v on %v clients", ch.Side,
				got["scale.live_data"], got["scale.list.seconds"], got["scale.restart.serving"], got["scale.watch.events"],
				got["scale.hold.sessions"], got["scale.hold.watches"], got["scale.hold.probes"], got["scale.hold.expired"], got["scale.hold.expired_clients"])
		}
		// The quota refuses every new write cleanly, deletes work, reads
		// are served; coord takes a write again once deletes made room,
		// etcd's NOSPACE alarm refuses it until an operator disarms it.
		if got["scale.quota.writes_refused"] != 20 || got["scale.quota.writes_other"] != 0 || got["scale.quota.deleted"] != 2000 ||
			got["scale.quota.get"] != 1 {
			t.Errorf("%s at the cap: %v refused, %v otherwise, %v deleted, get %v", ch.Side, got["scale.quota.writes_refused"],
				got["scale.quota.writes_other"], got["scale.quota.deleted"], got["scale.quota.get"])
		}
		if want := map[string]float64{"coord": 1, "etcd": 0}[ch.Side]; got["scale.quota.write_after_delete"] != want {
			t.Errorf("%s: a write after the deletes: %v, want %v", ch.Side, got["scale.quota.write_after_delete"], want)
		}
		if ch.Side == "coord" && (got["scale.quota.keyspace"] <= 0 || got["scale.quota.keyspace"] > 8) {
			t.Errorf("coord's keyspace at the cap: %v MB, want at most the 8 MiB cap", got["scale.quota.keyspace"])
		}
	}
	rows := map[string]report.Row{}
	for _, r := range res.Rows {
		rows[r.Name] = r
	}
	for _, n := range []string{"scale.restart.serving", "scale.join.mbps", "scale.put.p99_loaded_over_empty", "scale.loaded.rss_ratio.max"} {
		r, ok := rows[n]
		if !ok || r.Coord == nil || r.Etcd == nil || r.Target == "" || r.Verdict == "" {
			t.Errorf("row %s: %+v", n, r)
		}
	}
	if !strings.Contains(stdout.String(), "scale: ") {
		t.Errorf("no scale figures in the table:\n%s", stdout.String())
	}
}
