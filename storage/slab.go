package storage

import "github.com/coordcell/coord/internal/command"

// maxSlab bounds how many elements one slab array is made for, so that a
// large batch does not pin much more than its results need.
const maxSlab = 1024

// slabs hands out the small slices one Apply's results and events are
// made of (an op result, the key a put wrote, its event) from a few
// arrays shared by the batch, instead of allocating each one per entry.
// Every Apply starts with none: results and events leave the state
// machine for callers and watchers and outlive it, so an array is never
// reused; the slices handed out are capped so that an append by their
// holder reallocates instead of writing into a neighbour's.
type slabs struct {
	ops    []command.OpResult
	kvs    []command.KV
	events []Event
	// left is how many entries of the current Apply are still to come:
	// the size of the next array, which then usually serves the batch.
	left int
}

// take returns n zeroed elements of *s, starting a new array of about
// hint elements when the current one has too little room.
func take[T any](s *[]T, n, hint int) []T {
	if cap(*s)-len(*s) < n {
		*s = make([]T, 0, max(n, min(hint, maxSlab)))
	}
	l := len(*s)
	*s = (*s)[:l+n]
	return (*s)[l : l+n : l+n]
}

// opResults returns n op results for one transaction.
func (a *applier) opResults(n int) []command.OpResult {
	if n == 0 {
		return []command.OpResult{} // as make would: a result with no ops still has a non-nil slice
	}
	return take(&a.slabs.ops, n, a.slabs.left)
}

// oneKV returns a one-element slice holding kv.
func (a *applier) oneKV(kv command.KV) []command.KV {
	s := take(&a.slabs.kvs, 1, a.slabs.left)
	s[0] = kv
	return s
}

// addEvent appends e to events, taking the first element from the slab.
func (a *applier) addEvent(events []Event, e Event) []Event {
	if events == nil {
		events = take(&a.slabs.events, 1, a.slabs.left)[:0]
	}
	return append(events, e)
}
