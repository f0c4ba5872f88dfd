package spi

import "sync"

// Probes counts, per queue prefix, how often waiters start waiting and
// wake up. Each backend has one; only the root's tests register probes
// in it, to show that a release wakes one waiter, not the herd. With none
// registered, noting costs one map lookup.
type Probes struct {
	m sync.Map // prefix -> *Probe
}

// Probe counts the events of one prefix.
type Probe struct {
	mu      sync.Mutex
	counts  [3]int // by ProbeEvent
	changed chan struct{}
}

// ProbeEvent is what a probe counts.
type ProbeEvent int

// The events a probe counts.
const (
	ProbeWait   ProbeEvent = iota // a waiter found itself blocked and began watching
	ProbeWake                     // a watched blocker went, and the waiter re-read the queue
	ProbeRelist                   // Observe's watch ended and it read the group again
)

// Note counts ev for prefix, if a probe is registered for it.
func (r *Probes) Note(prefix string, ev ProbeEvent) {
	v, ok := r.m.Load(prefix)
	if !ok {
		return
	}
	p := v.(*Probe)
	p.mu.Lock()
	p.counts[ev]++
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Register starts counting for prefix in p.
func (r *Probes) Register(prefix string, p *Probe) { r.m.Store(prefix, p) }

// Unregister stops counting for prefix.
func (r *Probes) Unregister(prefix string) { r.m.Delete(prefix) }

// NewProbe returns an empty probe.
func NewProbe() *Probe { return &Probe{changed: make(chan struct{})} }

// Counts returns the counts by event and a channel closed at the next
// change.
func (p *Probe) Counts() (counts [3]int, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts, p.changed
}
