package client

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The index must find exactly the open upstreams a linear scan finds,
// broadest prefix first, through any order of opening and closing.
func TestUpIndexFindsWhatAScanFinds(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	alphabet := []string{"", "a", "a/", "a/b", "a/b/", "a/bc", "b", "b/a", "ab", "a/b/c/"}
	var x upIndex
	var open []*upstream
	for step := range 3000 {
		if len(open) == 0 || r.IntN(3) > 0 {
			up := &upstream{prefix: alphabet[r.IntN(len(alphabet))]}
			x.add(up)
			open = append(open, up)
		} else {
			i := r.IntN(len(open))
			x.remove(open[i])
			x.remove(open[i]) // a second removal changes nothing
			open = slices.Delete(open, i, i+1)
		}
		if x.len() != len(open) {
			t.Fatalf("seed %d step %d: len %d, %d open", seed, step, x.len(), len(open))
		}
		q := alphabet[r.IntN(len(alphabet))] + "x"
		var got []*upstream
		x.covering(q, func(up *upstream) bool { got = append(got, up); return false })
		var want []*upstream
		for _, up := range open {
			if strings.HasPrefix(q, up.prefix) {
				want = append(want, up)
			}
		}
		// Broadest first; among equal prefixes, the order they opened.
		slices.SortStableFunc(want, func(a, b *upstream) int { return len(a.prefix) - len(b.prefix) })
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d step %d: covering %q found %d upstreams, a scan %d", seed, step, q, len(got), len(want))
		}
	}
}

// covering stops at the first upstream f takes.
func TestUpIndexStopsWhenTaken(t *testing.T) {
	var x upIndex
	a, ab := &upstream{prefix: "a"}, &upstream{prefix: "ab"}
	x.add(ab)
	x.add(a)
	calls := 0
	var took *upstream
	x.covering("abc", func(up *upstream) bool { calls++; took = up; return true })
	if calls != 1 || took != a {
		t.Fatalf("covering called f %d times and took %q; want once, the broadest (a)", calls, took.prefix)
	}
}

// Joining the last of n watches on distinct prefixes costs the same
// whatever n: it once scanned every upstream.
func BenchmarkUpIndexCovering(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run("upstreams="+strconv.Itoa(n), func(b *testing.B) {
			var x upIndex
			for i := range n {
				x.add(&upstream{prefix: "scale/watch/0001/" + strconv.Itoa(1_000_000+i) + "/"})
			}
			q := "scale/watch/0001/" + strconv.Itoa(1_000_000+n) + "/"
			for b.Loop() {
				x.covering(q, func(*upstream) bool { return false })
			}
		})
	}
}
