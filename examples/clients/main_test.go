package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStory runs the example: it fails if a fenced write was refused or
// a worker lost its session when its member closed.
func TestStory(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
