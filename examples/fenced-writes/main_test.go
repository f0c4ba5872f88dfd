package main

import (
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// TestStory runs the demo: it fails if the storage service ever accepted
// a stale write, or if the story could not be told.
func TestStory(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
