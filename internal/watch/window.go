package watch

import (
	"sort"

	"github.com/coordcell/coord/storage"
)

// item is one event in a group's window.
type item struct {
	rev int64
	ev  *storage.Event
	end bool // the last event of its revision under this prefix
}

// window is a group's recent events, oldest first, in segments: arrays
// that are filled once, from the front, and never written again once a
// Publish has returned. Watchers read slices of them after the hub's lock
// is released, so nothing may move or overwrite an item they can see: the
// window moves on by dropping items from the front, and grows by
// appending past the end of what any watcher was handed. Each event is
// stored once and never copied; the memory a window pins is its
// capacity plus at most one segment (and whatever segments a watcher
// still reads, until it is done with them).
type window struct {
	segs [][]item // every segment but the last is full (len == cap)
	n    int      // items in the window
	size int      // the size of the last segment allocated
}

// The segment sizes: small for a quiet prefix (a lock waiter's key sees a
// change or two), doubling up to an eighth of the window, within bounds.
const (
	minSegment = 4
	maxSegment = 512
)

func segmentLimit(capacity int) int {
	return min(max(capacity/8, minSegment), maxSegment)
}

// len returns how many items the window holds.
func (w *window) len() int { return w.n }

// last returns the newest item, nil when the window is empty.
func (w *window) last() *item {
	if w.n == 0 {
		return nil
	}
	s := w.segs[len(w.segs)-1]
	return &s[len(s)-1]
}

// at returns the i-th oldest item.
func (w *window) at(i int) *item {
	for _, s := range w.segs {
		if i < len(s) {
			return &s[i]
		}
		i -= len(s)
	}
	panic("watch: window index out of range")
}

// push adds it as the newest item, in the last segment or, when that is
// full, in a new one of at most limit items.
func (w *window) push(it item, limit int) {
	k := len(w.segs)
	if k == 0 || len(w.segs[k-1]) == cap(w.segs[k-1]) {
		w.size = min(max(2*w.size, minSegment), limit)
		w.segs = append(w.segs, make([]item, 0, w.size))
		k++
	}
	w.segs[k-1] = append(w.segs[k-1], it)
	w.n++
}

// drop forgets the k oldest items. It only reslices: watchers may still
// be reading them.
func (w *window) drop(k int) {
	w.n -= k
	for k > 0 {
		s := w.segs[0]
		if k < len(s) || len(s) < cap(s) {
			// Within the first segment, or it is the last, partly filled
			// one: keep appending to it past what was handed out.
			w.segs[0] = s[k:]
			return
		}
		k -= len(s)
		// A full segment, wholly dropped. The segment list itself is
		// never handed out, so it may be shifted in place.
		n := copy(w.segs, w.segs[1:])
		w.segs[n] = nil
		w.segs = w.segs[:n]
	}
}

// after appends to dst the items with revisions after rev, oldest
// first, as slices of the segments that hold them (a revision may span
// two). Each slice's capacity ends at its length, so items appended later
// are out of its reach.
func (w *window) after(rev int64, dst [][]item) [][]item {
	if w.n == 0 {
		return dst
	}
	// Only an empty window has an empty segment.
	j := sort.Search(len(w.segs), func(j int) bool {
		s := w.segs[j]
		return s[len(s)-1].rev > rev
	})
	for ; j < len(w.segs); j++ {
		s := w.segs[j]
		i := sort.Search(len(s), func(i int) bool { return s[i].rev > rev })
		dst = append(dst, s[i:len(s):len(s)])
	}
	return dst
}

// reset empties the window. Watchers keep what they were handed.
func (w *window) reset() { *w = window{} }
