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

// TestSoak runs a short soak end to end: three member processes (this
// test binary re-executed), report lines, the summary, the JSON file,
// and no member process or data directory left behind.
func TestSoak(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "soak.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-soak", "3s", "-soak-interval", "1s", "-soak-put-rate", "60", "-soak-keys", "50",
		"-dir", dir, "-soak-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "soak summary:") {
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
	if len(res.Intervals) < 2 || res.Summary == nil || len(res.Pids) != 3 {
		t.Fatalf("results: %d intervals, summary %v, pids %v", len(res.Intervals), res.Summary, res.Pids)
	}
	s := res.Summary
	if s.Puts == 0 || s.LockCycles == 0 || s.Sessions == 0 || s.Errors != 0 {
		t.Errorf("summary: %+v", s)
	}
	for i := range 3 {
		if s.DataBytesMax[i] <= 0 || s.PeakRSS[i] <= 0 || s.CPUSeconds[i] <= 0 {
			t.Errorf("member %d: data %d, peak RSS %d, CPU %v", i, s.DataBytesMax[i], s.PeakRSS[i], s.CPUSeconds[i])
		}
	}
	for _, pid := range res.Pids {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("member process %d still runs", pid)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "coord-soak-") {
			t.Errorf("data directory %s left behind", e.Name())
		}
	}
}
