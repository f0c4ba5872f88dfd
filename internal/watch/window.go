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

// window is a group's recent events: whole revisions in (start, head],
// oldest first, at most capacity events, in a ring. It is the hub's
// alone, read and written only under the hub's lock: a watcher gets
// copies of its items (copyAfter), never a slice of the ring, so the ring
// may move and overwrite its slots freely, and a watcher that stops
// reading pins nothing of it.
type window struct {
	buf      []item // a ring of power-of-two size, at most the capacity rounded up
	first, n int    // the items are buf[first], buf[first+1], ... (mod len(buf)), n of them
	start    int64
	capacity int
}

func newWindow(capacity int, start int64) window {
	return window{capacity: capacity, start: start}
}

// len returns how many items the window holds.
func (w *window) len() int { return w.n }

// at returns the i-th oldest item.
func (w *window) at(i int) *item { return &w.buf[(w.first+i)&(len(w.buf)-1)] }

// last returns the newest item, nil when the window is empty.
func (w *window) last() *item {
	if w.n == 0 {
		return nil
	}
	return w.at(w.n - 1)
}

// push adds it as the newest item. A full window first forgets its
// oldest item, which may leave it starting mid-revision: endRevision
// puts that right once the revision being added is complete.
func (w *window) push(it item) {
	if w.n == w.capacity {
		w.start = w.at(0).rev
		w.dropOldest()
	}
	if w.n == len(w.buf) {
		// Grow by doubling, so a quiet prefix costs a few items and a busy
		// one reaches its capacity in a handful of copies.
		buf := make([]item, min(max(2*len(w.buf), 4), ceilPow2(w.capacity)))
		for i := range w.n {
			buf[i] = *w.at(i)
		}
		w.buf, w.first = buf, 0
	}
	*w.at(w.n) = it
	w.n++
}

func (w *window) dropOldest() {
	*w.at(0) = item{} // pin no event
	w.first = (w.first + 1) & (len(w.buf) - 1)
	w.n--
}

// endRevision is called once a revision is complete: it forgets what is
// left of the revision whose first events were forgotten, so the window
// never starts mid-revision.
func (w *window) endRevision() {
	for w.n > 0 && w.at(0).rev == w.start {
		w.dropOldest()
	}
}

// copyAfter appends to dst copies of the items with revisions after rev,
// oldest first: limit of them, or as many more as it takes to end on a
// whole revision (the watch goes on from the revision of the last item
// it delivered), or all there are if fewer.
func (w *window) copyAfter(rev int64, dst []item, limit int) []item {
	i := sort.Search(w.n, func(i int) bool { return w.at(i).rev > rev })
	j := min(i+max(limit, 1), w.n)
	for j < w.n && !w.at(j-1).end {
		j++
	}
	if i == j {
		return dst
	}
	// At most two runs of the ring.
	lo, hi := (w.first+i)&(len(w.buf)-1), (w.first+j)&(len(w.buf)-1)
	if lo < hi {
		return append(dst, w.buf[lo:hi]...)
	}
	return append(append(dst, w.buf[lo:]...), w.buf[:hi]...)
}

// reset empties the window, which now starts at rev.
func (w *window) reset(rev int64) { *w = newWindow(w.capacity, rev) }

func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
