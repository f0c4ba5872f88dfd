package client

import "slices"

// upIndex finds the open upstreams whose prefix covers a watch's prefix
// without looking at the others: a client holding thousands of watches
// on distinct prefixes once spent most of its CPU comparing each new
// watch's prefix with every upstream's (quadratic in the watches). An
// upstream of prefix p covers prefix q when q starts with p, so only the
// upstreams filed under q[:l], for each length l some open prefix has,
// can: a handful of map lookups, however many upstreams are open.
type upIndex struct {
	byPrefix map[string][]*upstream // in the order they were opened
	lens     []int                  // the distinct lengths of those prefixes, ascending
	perLen   map[int]int            // how many distinct open prefixes have each length
	count    int
}

func (x *upIndex) add(up *upstream) {
	if x.byPrefix == nil {
		x.byPrefix, x.perLen = make(map[string][]*upstream), make(map[int]int)
	}
	ups, ok := x.byPrefix[up.prefix]
	x.byPrefix[up.prefix] = append(ups, up)
	x.count++
	if !ok {
		if x.perLen[len(up.prefix)]++; x.perLen[len(up.prefix)] == 1 {
			i, _ := slices.BinarySearch(x.lens, len(up.prefix))
			x.lens = slices.Insert(x.lens, i, len(up.prefix))
		}
	}
}

func (x *upIndex) remove(up *upstream) {
	ups := x.byPrefix[up.prefix]
	i := slices.Index(ups, up)
	if i < 0 {
		return
	}
	x.count--
	if len(ups) > 1 {
		x.byPrefix[up.prefix] = slices.Delete(ups, i, i+1)
		return
	}
	delete(x.byPrefix, up.prefix)
	// The length stays while another open prefix has it.
	if x.perLen[len(up.prefix)]--; x.perLen[len(up.prefix)] > 0 {
		return
	}
	delete(x.perLen, len(up.prefix))
	if j, found := slices.BinarySearch(x.lens, len(up.prefix)); found {
		x.lens = slices.Delete(x.lens, j, j+1)
	}
}

// covering calls f with each open upstream whose prefix covers prefix,
// the broadest first, until f returns true.
func (x *upIndex) covering(prefix string, f func(*upstream) bool) {
	for _, l := range x.lens {
		if l > len(prefix) {
			return
		}
		for _, up := range x.byPrefix[prefix[:l]] {
			if f(up) {
				return
			}
		}
	}
}

func (x *upIndex) len() int { return x.count }
