package storage

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (Pebble's
// background work, a test's helpers) outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
