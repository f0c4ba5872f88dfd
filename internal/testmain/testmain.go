// Package testmain is the TestMain of coord's test binaries: it runs the
// tests, fails a passing run that leaves a goroutine behind (goleak), and
// ends a passing binary built with -race without the race runtime's
// pause at exit.
//
// That pause is the race runtime's atexit_sleep_ms (1 s by default): on
// exit it waits for other threads to report their races. A Go test
// binary never needs it: the testing package fails every test during
// which a race was reported, and a run that saw a race outside every
// test, so a passing run has nothing left to report. With some thirty
// test binaries, two at a time, the pause was about 15 s of each
// `go test -race ./...`. A failing run exits through os.Exit as before,
// so the race runtime's summary and exit code are unchanged.
package testmain

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// Run runs m's tests, checks for leaked goroutines as
// goleak.VerifyTestMain does (with opts), and exits.
func Run(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	if code == 0 && raceEnabled {
		syscall.Exit(0) // past os.Exit's racefini, whose only work left is the pause
	}
	os.Exit(code)
}
