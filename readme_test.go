package coord_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
)

// The README is a newcomer's way in, so it is held to what it says: its
// example runs here and is the very text it shows, it stays short, its
// links (and the guides') lead somewhere, its package map names every
// package, and the errors guide explains every sentinel.

// readmeMaxBytes bounds README.md: it points to the guides in docs/
// rather than growing into them.
const readmeMaxBytes = 12 << 10

// TestReadmeExample is README.md's example, verbatim (see
// TestReadmeShowsItsExample).
func TestReadmeExample(t *testing.T) {
	ctx := context.Background()
	c := coordtest.NewCluster(t, 3) // a 3-member cell in memory, closed when the test ends
	n := c.Leader()                 // a *coord.Node; a *coord.Client offers the same API

	s, err := n.NewSession(ctx) // this holder's liveness; keep-alives never touch the log
	require.NoError(t, err)
	m := coord.NewMutex(s, "jobs") // a fair, cell-wide lock
	token, err := m.Lock(ctx)      // its fencing token: greater than every earlier grant's
	require.NoError(t, err)

	kv, err := n.Put(ctx, "jobs/next", []byte("17"), coord.IfVersion(0)) // create only
	require.NoError(t, err)
	_, err = n.Put(ctx, "jobs/next", []byte("18"), coord.IfVersion(kv.Version)) // compare-and-set
	require.NoError(t, err)
	_, err = n.Put(ctx, "jobs/next", []byte("19"), coord.IfVersion(kv.Version)) // a stale version
	require.ErrorIs(t, err, coord.ErrConflict)                                  // changes nothing

	fence := coord.NewFence(nil) // the resource's side: refuses tokens below the highest it saw
	require.NoError(t, fence.Admit("jobs", token))
	require.NoError(t, m.Unlock(ctx))
}

// TestReadmeShowsItsExample keeps README.md's example the code that
// TestReadmeExample runs, so the README never shows code that does not
// compile or work.
func TestReadmeShowsItsExample(t *testing.T) {
	t.Parallel()
	src := readFile(t, "readme_test.go")
	start := strings.Index(src, "func TestReadmeExample(")
	require.GreaterOrEqual(t, start, 0)
	end := strings.Index(src[start:], "\n}\n")
	require.Greater(t, end, 0)
	example := src[start : start+end+len("\n}\n")]
	if !strings.Contains(readFile(t, "README.md"), "```go\n"+example+"```\n") {
		t.Errorf("README.md must show, in a go block, TestReadmeExample exactly as readme_test.go has it:\n%s", example)
	}
}

func TestReadmeSize(t *testing.T) {
	t.Parallel()
	fi, err := os.Stat("README.md")
	require.NoError(t, err)
	require.LessOrEqual(t, fi.Size(), int64(readmeMaxBytes),
		"README.md is %d bytes, past %d: move detail to a guide in docs/", fi.Size(), readmeMaxBytes)
}

// TestDocLinks checks every relative link of README.md, ARCHITECTURE.md
// and docs/*.md: the file (or directory) it names exists, and a
// #fragment names a heading of the Markdown file it points into.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	files := []string{"README.md", "ARCHITECTURE.md"}
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, guides, "no guides in docs/")
	files = append(files, guides...)
	for _, file := range files {
		for _, target := range markdownLinks(readFile(t, file)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", file, target, err)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !slices.Contains(headingAnchors(readFile(t, dest)), frag) {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", file, target, dest, frag)
			}
		}
	}
}

// TestReadmePackageMap checks that README.md names every package of the
// module (by its directory), so its map of the packages follows the code.
func TestReadmePackageMap(t *testing.T) {
	t.Parallel()
	readme := readFile(t, "README.md")
	for _, dir := range packageDirs(t) {
		named := regexp.MustCompile(`(^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(dir) + `([^A-Za-z0-9_-]|$)`)
		if !named.MatchString(readme) {
			t.Errorf("README.md does not name package directory %s: add it to the map of the packages", dir)
		}
	}
}

// TestErrorsGuideNamesEverySentinel checks that docs/guarantees-and-errors.md,
// the one place errors are explained, names every sentinel the root
// package exports.
func TestErrorsGuideNamesEverySentinel(t *testing.T) {
	t.Parallel()
	guide := readFile(t, filepath.Join("docs", "guarantees-and-errors.md"))
	sentinels := rootSentinels(t)
	require.NotEmpty(t, sentinels)
	for _, name := range sentinels {
		if !strings.Contains(guide, "`"+name+"`") {
			t.Errorf("docs/guarantees-and-errors.md does not explain %s", name)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

var (
	fencedBlock = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```[^\\n]*$")
	codeSpan    = regexp.MustCompile("`[^`]*`")
	inlineLink  = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink     = regexp.MustCompile(`(?m)^\s*\[[^\]]+\]:\s*(\S+)`)
)

// markdownLinks returns the targets of the links in a Markdown text,
// leaving out code blocks and code spans, which hold no links.
func markdownLinks(md string) []string {
	md = codeSpan.ReplaceAllString(fencedBlock.ReplaceAllString(md, ""), "")
	var out []string
	for _, re := range []*regexp.Regexp{inlineLink, refLink} {
		for _, m := range re.FindAllStringSubmatch(md, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives a Markdown text's
// headings: lower case, punctuation dropped, spaces as hyphens, and -1,
// -2... after a repeated one.
func headingAnchors(md string) []string {
	md = fencedBlock.ReplaceAllString(md, "")
	seen := map[string]int{}
	var out []string
	for line := range strings.Lines(md) {
		line = strings.TrimRight(line, "\n")
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		text, ok := strings.CutPrefix(line[hashes:], " ")
		if hashes == 0 || hashes > 6 || !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimRight(text, "# "))) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			out = append(out, anchor+"-"+strconv.Itoa(n))
		} else {
			out = append(out, anchor)
		}
		seen[anchor]++
	}
	return out
}

// packageDirs returns the directories, relative to the module root, that
// hold a package of this module: every directory with Go files, except
// the root, testdata, hidden ones and nested modules (bench/).
func packageDirs(t *testing.T) []string {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		if path != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		gofiles, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		if path != "." && len(gofiles) > 0 {
			dirs = append(dirs, filepath.ToSlash(path))
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	return dirs
}

// rootSentinels returns the exported Err... variables declared in the
// root package's production files.
func rootSentinels(t *testing.T) []string {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var names []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(id.Name, "Err") && id.IsExported() {
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	return names
}
