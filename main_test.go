package coord_test

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// defaultParallel is how many of this package's parallel tests run at
// once unless -test.parallel says otherwise. Most of them wait on
// election timeouts, keep-alive intervals and expiries, not on the CPU
// (under -race the package used 77 s of CPU in 197 s serially), so
// more than GOMAXPROCS of them at once keeps the machine busy without
// crowding it. Tests that measure the process itself (its allocations,
// its CPU time) do not call t.Parallel and run alone before the others.
const defaultParallel = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", defaultParallel); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}
