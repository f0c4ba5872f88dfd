package sim

import (
	"flag"
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

var (
	seedCount = flag.Int("seeds", 0, "histories to run (0: the default, fewer under -race)")
	oneSeed   = flag.Int64("seed", 0, "replay the history of this seed only")
	virtual   = flag.Duration("virtual", 0, "virtual time of each history's faults (0: 30s)")
	// addAnytime adds members while others are down, paused or cut
	// off, which reached a liveness bug, now fixed (readyToAdd).
	addAnytime = flag.Bool("addanytime", false, "add members whatever the faults (members that miss an addition, issue 25)")
	seedBase   = flag.Int64("seedbase", 0, "the first of -seeds seeds (0: drawn at random), to compare runs on the same histories")
)

func TestMain(m *testing.M) { testmain.Run(m) }
