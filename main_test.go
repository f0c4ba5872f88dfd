package coord_test

import (
	"flag"
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

// Most of this package's tests call t.Parallel: they wait on election
// timeouts, keep-alive intervals and expiries more than on the CPU (under
// -race the package used 77 s of CPU in 197 s serially). They run four
// at a time unless -parallel says otherwise: under -race on 2 cores that
// is 54 s against 77 s at GOMAXPROCS, and the package is the longest of
// the suite. (Four at once once starved a 1 s session beside two CPU
// burners, in TestMutexPassesOnWhenHolderDies; it and the other tests
// that wait out TTLs now run in virtual time.) Tests that measure the
// process itself (its allocations, its CPU time) do not call t.Parallel
// and run alone before the others.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", "4"); err != nil {
			panic(err)
		}
	}
	testmain.Run(m)
}
