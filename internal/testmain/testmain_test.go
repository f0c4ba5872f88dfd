package testmain

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// childMode makes the test binary a child whose one test does what the
// mode names, under Run.
const childMode = "TESTMAIN_CHILD"

func TestMain(m *testing.M) { Run(m) }

func TestChild(t *testing.T) {
	switch os.Getenv(childMode) {
	case "": // the parent: TestRunVerdicts runs this test in children
	case "leak":
		block := make(chan struct{})
		go func() { <-block }()
	case "race":
		var x int
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { x++ })
		}
		wg.Wait()
	}
}

// TestRunVerdicts: a passing run exits 0, a leaked goroutine fails it,
// and under -race a data race still fails it though a passing race binary
// skips the race runtime's exit.
func TestRunVerdicts(t *testing.T) {
	cases := []struct {
		mode   string
		pass   bool
		output string
	}{
		{"pass", true, "PASS"},
		{"leak", false, "goleak"},
	}
	if raceEnabled {
		cases = append(cases, struct {
			mode   string
			pass   bool
			output string
		}{"race", false, "DATA RACE"})
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
			cmd.Env = append(os.Environ(), childMode+"="+c.mode)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if (err == nil) != c.pass {
				t.Fatalf("mode %s: exit %v, want pass=%v; output:\n%s", c.mode, err, c.pass, out)
			}
			if !strings.Contains(string(out), c.output) {
				t.Fatalf("mode %s: output lacks %q:\n%s", c.mode, c.output, out)
			}
			t.Logf("mode %s: %v", c.mode, time.Since(start))
		})
	}
}
