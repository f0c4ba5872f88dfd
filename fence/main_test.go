package fence_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(holdMarksEnv); path != "" {
		holdMarks(path)
		return
	}
	goleak.VerifyTestMain(m)
}
