package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStory runs the demo: it fails if the storage service ever accepted
// a stale write, or if the story could not be told.
func TestStory(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
