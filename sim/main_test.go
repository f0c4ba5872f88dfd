package sim

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

var (
	seedCount = flag.Int("seeds", 0, "histories to run (0: the default, fewer under -race)")
	oneSeed   = flag.Int64("seed", 0, "replay the history of this seed only")
	virtual   = flag.Duration("virtual", 0, "virtual time of each history's faults (0: 30s)")
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
