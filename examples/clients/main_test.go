package main

import (
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// TestStory runs the example: it fails if a fenced write was refused or
// a worker lost its session when its member closed.
func TestStory(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
