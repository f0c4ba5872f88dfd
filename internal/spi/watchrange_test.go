package spi

import "testing"

// A ranged watch is served as the longest prefix its keys share, and
// filtered to the range.
func TestResolveWatch(t *testing.T) {
	for _, c := range []struct {
		key, end, prefix string
		in, out          []string
	}{
		{"a/b", "a/d", "a/", []string{"a/b", "a/c9"}, []string{"a/a", "a/d", "a/d0", "b"}},
		{"k", "\x00", "", []string{"k", "k0", "z"}, []string{"a", "j\xff"}},
		{"abc", "abd", "ab", []string{"abc", "abc\xff"}, []string{"abd", "ab"}},
		{"z", "a", "", nil, []string{"a", "z", "zz"}},
	} {
		o := WatchOptions{Range: true, End: c.end}
		if p := ResolveWatch(c.key, &o); p != c.prefix {
			t.Errorf("[%q, %q): prefix %q, want %q", c.key, c.end, p, c.prefix)
		}
		for _, k := range c.in {
			if !o.Admits(k) {
				t.Errorf("[%q, %q) refuses %q", c.key, c.end, k)
			}
		}
		for _, k := range c.out {
			if o.Admits(k) {
				t.Errorf("[%q, %q) admits %q", c.key, c.end, k)
			}
		}
	}
	o := WatchOptions{Exact: true}
	if p := ResolveWatch("config/sched", &o); p != "config/sched" || !o.Admits("config/sched") || o.Admits("config/sched2") {
		t.Errorf("exact: prefix %q, match %+v", p, o)
	}
}
