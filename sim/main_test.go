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
	// addWhenReady adds members only while every member runs and hears
	// the others, the schedule of histories before issue 25's fix of
	// members that miss an addition (readyToAdd), to replay their seeds.
	addWhenReady = flag.Bool("addwhenready", false, "add members only on a whole cell (the schedule before issue 25's fix)")
	seedBase     = flag.Int64("seedbase", 0, "the first of -seeds seeds (0: drawn at random), to compare runs on the same histories")
)

func TestMain(m *testing.M) { testmain.Run(m) }
