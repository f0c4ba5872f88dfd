package fence_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestImportsOnlyStandardLibrary keeps fence cheap to link: a service
// that only checks tokens must not pull in Raft, Pebble or msgpack.
// go/build reports the imports of every non-test file for this platform;
// the build-tagged lock files are checked for the others below.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows", "plan9"} {
		ctx := build.Default
		ctx.GOOS = goos
		pkg, err := ctx.ImportDir(".", 0)
		if err != nil {
			t.Fatalf("GOOS=%s: %v", goos, err)
		}
		for _, imp := range pkg.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if strings.Contains(first, ".") {
				t.Errorf("GOOS=%s: fence imports %q; it must import only the standard library", goos, imp)
			}
		}
		if len(pkg.Imports) == 0 {
			t.Errorf("GOOS=%s: no imports found; the check is not looking at the package", goos)
		}
	}
}
