package attack

import (
	"slices"
)

// MaxDelta is the largest peak heap and peak RSS over its start of any
// member in any of the results but those named in except: with MaxGap,
// the bounds SECURITY.md states.
func (rep *Report) MaxDelta(except ...string) (heap int64, rss int64) {
	for _, res := range rep.Results {
		if slices.Contains(except, res.Name) {
			continue
		}
		for m := range res.Peak {
			if m < len(res.Base) {
				heap = max(heap, res.Peak[m].Heap-res.Base[m].Heap)
				rss = max(rss, res.Peak[m].RSS-res.Base[m].RSS)
			}
		}
	}
	return heap, rss
}

// MaxGap is the longest commit gap of any control in the results but
// those named in except.
func (rep *Report) MaxGap(except ...string) float64 {
	var g float64
	for _, res := range rep.Results {
		if slices.Contains(except, res.Name) {
			continue
		}
		for _, c := range res.Controls {
			g = max(g, c.GapSeconds)
		}
	}
	return g
}
