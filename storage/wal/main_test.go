package wal

import (
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { testmain.Run(m) }
