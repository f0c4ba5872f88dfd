package fence_test

import (
	"os"
	"testing"

	"github.com/coordcell/coord/internal/testmain"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(holdMarksEnv); path != "" {
		holdMarks(path)
		return
	}
	testmain.Run(m)
}
