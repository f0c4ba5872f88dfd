package raftnode

import (
	"sync"

	"github.com/coordcell/coord/transport"
)

// Pausing stands still as a process stopped by SIGSTOP, or a long GC
// pause, would: the raft loop, the apply loop and the snapshot receiver
// stop at their next step, and the snapshot streams stop before their
// next chunk. Meanwhile nothing is ticked, read, sent or applied; the
// transport's inbox fills and then drops, as a real process's socket
// buffers would; time goes on for everyone else. On Resume each loop
// carries on with whatever it had queued: at most one pending tick (as a
// timer that fired during a SIGSTOP is delivered once), the messages
// still in the inbox, the callers' requests.

// pauseGate is where the node's loops stop while paused. A loop is
// active while it works and idle while it waits for work or for another
// loop; Pause returns once none is active, so a paused node's state no
// longer changes.
type pauseGate struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed while not paused
	active  int           // loops between enter and exit
	idle    chan struct{} // closed when active drops to 0 during a pause
}

func (g *pauseGate) init() {
	g.resumed = make(chan struct{})
	close(g.resumed)
}

// enter marks a loop active, first waiting while the node is paused. It
// returns false if stop closed first (the loop must then end).
func (g *pauseGate) enter(stop <-chan struct{}) bool {
	for {
		g.mu.Lock()
		if !g.paused {
			g.active++
			g.mu.Unlock()
			return true
		}
		resumed := g.resumed
		g.mu.Unlock()
		select {
		case <-resumed:
		case <-stop:
			return false
		}
	}
}

// exit marks a loop idle: about to wait for work or for another loop.
func (g *pauseGate) exit() {
	g.mu.Lock()
	g.active--
	if g.active == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}

// wait blocks while the node is paused, without counting as a loop; it
// returns false if stop closed first.
func (g *pauseGate) wait(stop <-chan struct{}) bool {
	g.mu.Lock()
	resumed := g.resumed
	g.mu.Unlock()
	select {
	case <-resumed:
		return true
	case <-stop:
		return false
	}
}

func (g *pauseGate) isPaused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// Pause stops the member as SIGSTOP would, and returns once its loops
// have stopped (or the node stopped): from then until Resume it ticks,
// reads, sends and applies nothing, and its Status does not change.
// Raft timers are frozen with it, so on Resume it behaves as a member
// that slept: a leader that the others replaced meanwhile steps down at
// the first message of the newer term, a follower catches up. Callers'
// requests wait (bounded by their contexts). Stop works while paused.
// Pausing a paused node does nothing.
func (n *Node) Pause() {
	g := &n.gate
	g.mu.Lock()
	if !g.paused {
		g.paused = true
		g.resumed = make(chan struct{})
	}
	var idle chan struct{}
	if g.active > 0 {
		if g.idle == nil {
			g.idle = make(chan struct{})
		}
		idle = g.idle
	}
	g.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-n.stopc:
		}
	}
}

// Resume lets a paused member carry on with whatever it had queued.
// Resuming a running node does nothing.
func (n *Node) Resume() {
	g := &n.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused {
		return
	}
	g.paused = false
	close(g.resumed)
	if g.idle != nil {
		// A Pause still waiting for the loops to stop has nothing to
		// wait for any more.
		close(g.idle)
		g.idle = nil
	}
}

// Unpaused returns a channel that is closed while the member is not
// paused: already closed if it runs, closed by Resume if it is paused.
// Work done on the member's behalf outside this package (session
// keep-alives, timers of the embedding node) waits on it so that a
// paused member is silent as a whole.
func (n *Node) Unpaused() <-chan struct{} {
	g := &n.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resumed
}

// idleWhile runs wait, a blocking hand-off to another of the node's
// goroutines, as idle time for the pause gate: the other goroutine may be
// the one that is paused. It returns false if the node stopped.
func (n *Node) idleWhile(wait func()) bool {
	n.gate.exit()
	wait()
	return n.gate.enter(n.stopc)
}

// followFreezes pauses and resumes the node as its transport says (the
// in-memory Network's Pause, for tests), until the node stops.
func (n *Node) followFreezes(f transport.Freezer) {
	for {
		frozen, changed := f.Frozen()
		if frozen {
			n.Pause()
		} else {
			n.Resume()
		}
		f.Settled(frozen)
		select {
		case <-changed:
		case <-n.stopc:
			return
		}
	}
}

// handTo sends v on ch for another of the node's goroutines, waiting (as
// idle time for the pause gate, since the receiver may be the one paused)
// only when ch is full. It returns false if the node stopped first.
func handTo[T any](n *Node, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-n.stopc:
		return false
	default:
	}
	sent := false
	return n.idleWhile(func() {
		select {
		case ch <- v:
			sent = true
		case <-n.stopc:
		}
	}) && sent
}
