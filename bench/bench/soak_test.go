package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSoak runs a short soak end to end on both sides at once: three
// member processes a side (this test binary re-executed), report lines,
// the summaries, the comparison, the segment counts, the JSON file, and
// no member process or data directory left behind.
func TestSoak(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "soak.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-soak", "3s", "-soak-interval", "1s", "-soak-put-rate", "60", "-soak-keys", "50",
		"-dir", dir, "-soak-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "soak summary, coord:") || !strings.Contains(stdout.String(), "soak summary, etcd:") {
		t.Errorf("no summary:\n%s", stdout.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res soakResults
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Sides) != 2 || res.Sides[0].Side != "coord" || res.Sides[1].Side != "etcd" {
		t.Fatalf("sides: %+v", res.Sides)
	}
	for _, sd := range res.Sides {
		if len(sd.Intervals) < 2 || sd.Summary == nil || len(sd.Pids) != 3 {
			t.Fatalf("%s: %d intervals, summary %v, pids %v", sd.Side, len(sd.Intervals), sd.Summary, sd.Pids)
		}
		s := sd.Summary
		if s.Puts == 0 || s.LockCycles == 0 || s.Sessions == 0 || s.Errors != 0 {
			t.Errorf("%s: summary: %+v", sd.Side, s)
		}
		for i := range 3 {
			if s.DataBytesMax[i] <= 0 || s.PeakRSS[i] <= 0 || s.CPUSeconds[i] <= 0 {
				t.Errorf("%s member %d: data %d, peak RSS %d, CPU %v", sd.Side, i, s.DataBytesMax[i], s.PeakRSS[i], s.CPUSeconds[i])
			}
		}
		for _, pid := range sd.Pids {
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
				t.Errorf("%s member process %d still runs", sd.Side, pid)
			}
		}
	}
	// Each coord member started its log's first segment, none on the
	// append path; etcd does not count them.
	if s := res.Sides[0].Summary; s.SegmentsStarted < 3 || s.SegmentsInline != 0 {
		t.Errorf("coord segments: started %d, inline %d", s.SegmentsStarted, s.SegmentsInline)
	}
	if s := res.Sides[1].Summary; s.SegmentsStarted != -1 {
		t.Errorf("etcd segments: %d, want -1 (not counted)", s.SegmentsStarted)
	}
	if c := res.Compare; c == nil || c.Pairs < 2 || len(c.Intervals) != c.Pairs {
		t.Errorf("comparison: %+v", c)
	}
	if !strings.Contains(stdout.String(), "coord's p99 at or below etcd's") {
		t.Errorf("no comparison printed:\n%s", stdout.String())
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "coord-soak-") {
			t.Errorf("data directory %s left behind", e.Name())
		}
	}
}
