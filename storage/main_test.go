package storage

import (
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

// TestMain fails the package's tests if any goroutine (Pebble's
// background work, a test's helpers) outlives them.
func TestMain(m *testing.M) { testmain.Run(m) }
