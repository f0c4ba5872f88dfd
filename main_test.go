package coord_test

import (
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

// Most of this package's tests call t.Parallel: they wait on election
// timeouts, keep-alive intervals and expiries more than on the CPU (under
// -race the package used 77 s of CPU in 197 s serially). They run
// GOMAXPROCS at a time (go test's default): four at once beside two CPU
// burners starved a 1 s session in TestMutexPassesOnWhenHolderDies.
// Tests that measure the process itself (its allocations, its CPU time)
// do not call t.Parallel and run alone before the others.
func TestMain(m *testing.M) {
	testmain.Run(m)
}
