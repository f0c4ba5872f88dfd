// Package proposer numbers one proposer's commands for exactly-once
// application (storage's proposer table): a member's boot and a client
// each number theirs with a Window, and say with every command its floor,
// below which they will ask for no result again.
package proposer

import "math/rand/v2"

// NewID returns a proposer ID: random and never zero, so a restarted
// member or a new client never meets the records of an earlier one.
func NewID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// Window hands out sequence numbers from 1 and says the floor: the lowest
// one whose result may still be wanted, because its caller still waits or
// was told its outcome is unknown not long ago (pinned). It is not safe
// for concurrent use.
type Window struct {
	last   uint64
	floor  uint64
	live   map[uint64]struct{}
	pinned []uint64 // oldest first
}

// MaxPinned bounds the unknown outcomes a Window keeps askable.
const MaxPinned = 256

// NewWindow returns an empty window.
func NewWindow() *Window {
	return &Window{floor: 1, live: make(map[uint64]struct{})}
}

// Take returns the next sequence number, now live, and the floor.
func (w *Window) Take() (seq, floor uint64) {
	w.last++
	w.live[w.last] = struct{}{}
	return w.last, w.floor
}

// Done releases seq: its caller has its result, or its command was never
// sent. The floor moves past every released number.
func (w *Window) Done(seq uint64) {
	delete(w.live, seq)
	for w.floor <= w.last {
		if _, ok := w.live[w.floor]; ok {
			return
		}
		w.floor++
	}
}

// Pin keeps seq wanted (its caller may ask for its outcome) until
// MaxPinned later ones push it out.
func (w *Window) Pin(seq uint64) {
	w.pinned = append(w.pinned, seq)
	if len(w.pinned) > MaxPinned {
		old := w.pinned[0]
		w.pinned = w.pinned[1:]
		w.Done(old)
	}
}

// Floor is the lowest sequence number whose result may still be wanted.
func (w *Window) Floor() uint64 { return w.floor }
