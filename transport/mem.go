package transport

import (
	"math/rand"
	"slices"
	"sync"
	"time"
)

const (
	// memRecvBuffer is the capacity of each member's Receive channel.
	memRecvBuffer = 1024
	// memLinkQueue bounds the envelopes waiting on one link, so a stuck
	// receiver costs bounded memory and Send can drop instead of block.
	memLinkQueue = 1024
)

// Network is an in-memory network for tests. Members join by name and get
// a Transport; faults (partitions, one-way blocks, loss, delay,
// duplication, reordering) can be switched on and off at any time.
//
// Every random decision is drawn from one seeded source under the
// network's lock, at Send time, so the same seed and the same sequence of
// sends give the same decisions.
//
// Each ordered pair of members (a link) has a bounded queue and one
// goroutine that delivers from it, so a slow receiver holds up only its
// own links. A Network is safe for concurrent use.
type Network struct {
	mu      sync.Mutex
	rng     *rand.Rand
	members map[string]*memTransport
	links   map[linkKey]*memLink
	closed  bool
	done    chan struct{} // closed by Close: stops every link goroutine
	wg      sync.WaitGroup

	// Connectivity faults.
	groups   map[string]int // member -> partition group; nil = no partition
	isolated map[string]bool
	blocked  map[linkKey]bool

	// Rate faults.
	dropRate, dupRate, reorderRate float64
	minDelay, maxDelay             time.Duration

	stats NetworkStats
}

// NetworkStats counts what a Network did with the envelopes it was given.
// Each duplicate counts once in Duplicated and then like any other
// envelope in Delivered or Dropped.
type NetworkStats struct {
	Sent       uint64 // envelopes passed to Send by open members
	Delivered  uint64 // envelopes put on a receiver's channel
	Dropped    uint64 // envelopes lost: faults, full queues, closed or unknown receivers
	Duplicated uint64 // extra copies made by SetDuplicateRate
}

type linkKey struct{ from, to string }

// memLink is the queue of one direction between two members. Its fields
// are guarded by Network.mu; wake (capacity 1) nudges its goroutine.
type memLink struct {
	key   linkKey
	queue []pending
	last  time.Time // latest deliver time in queue, to keep delays FIFO
	wake  chan struct{}
}

type pending struct {
	env Envelope
	at  time.Time
	// to is the incarnation the envelope was sent to: if it closes
	// meanwhile, the envelope dies with it, as it would on a crash,
	// rather than reaching the member's next incarnation.
	to *memTransport
}

// NewNetwork returns an empty network whose random decisions come from
// seed. Close it to stop its goroutines.
func NewNetwork(seed int64) *Network {
	return &Network{
		rng:      rand.New(rand.NewSource(seed)),
		members:  make(map[string]*memTransport),
		links:    make(map[linkKey]*memLink),
		done:     make(chan struct{}),
		isolated: make(map[string]bool),
		blocked:  make(map[linkKey]bool),
	}
}

// Join adds a member and returns its transport. Its Receive channel is
// buffered (1024 envelopes) and closed when the transport closes, by its
// own Close, a later Join of the same name, or Network.Close. Nothing is
// lost on the way to it except by the faults configured, a full link
// queue, or the receiver closing.
//
// Joining a name whose previous transport is still open closes that one
// first: this is how a test restarts a crashed node, and a node never has
// two live inboxes. Envelopes in flight to the old transport are dropped,
// not handed to the new one. After the network is closed, Join returns an
// already-closed transport.
func (n *Network) Join(name string) Transport {
	t := &memTransport{
		net:  n,
		name: name,
		recv: make(chan Envelope, memRecvBuffer),
		done: make(chan struct{}),
	}
	n.mu.Lock()
	old := n.members[name]
	closed := n.closed
	if !closed {
		n.members[name] = t
	}
	n.mu.Unlock()
	if old != nil {
		old.Close()
	}
	if closed {
		t.Close()
	}
	return t
}

// Pause freezes member name as SIGSTOP would, and returns once it
// stands still (see Freezer): it stays so until Resume, while envelopes to it queue in its inbox
// and, once that is full, on its links and then drop, as a frozen
// process's socket buffers would. A restart (a new Join of the name)
// starts unfrozen. Pausing an unknown member does nothing.
func (n *Network) Pause(name string) { n.freeze(name, true) }

// Resume lets a member frozen by Pause carry on with what it had queued.
func (n *Network) Resume(name string) { n.freeze(name, false) }

func (n *Network) freeze(name string, frozen bool) {
	n.mu.Lock()
	t := n.members[name]
	n.mu.Unlock()
	if t != nil {
		t.setFrozen(frozen)
	}
}

// Close stops all delivery, closes every member's transport (so their
// Receive channels close) and waits for the network's goroutines to exit.
// It is safe to call more than once.
func (n *Network) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.done)
	members := make([]*memTransport, 0, len(n.members))
	for _, t := range n.members {
		members = append(members, t)
	}
	n.mu.Unlock()
	for _, t := range members {
		t.Close()
	}
	n.wg.Wait()
}

// Partition splits the members into groups that cannot reach each other.
// A member named in no group is cut off from everyone. It replaces any
// earlier partition; isolations and blocks stay.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.groups = make(map[string]int)
	for i, g := range groups {
		for _, name := range g {
			n.groups[name] = i
		}
	}
}

// Isolate cuts name off from every other member, in both directions,
// until Heal.
func (n *Network) Isolate(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isolated[name] = true
}

// Block drops everything sent from one member to another (one way only)
// until Unblock or Heal.
func (n *Network) Block(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.blocked[linkKey{from, to}] = true
}

// Unblock undoes Block(from, to).
func (n *Network) Unblock(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.blocked, linkKey{from, to})
}

// Heal removes every connectivity fault: partitions, isolations and
// blocks. Rate faults (drop, delay, duplicate, reorder) stay, because
// tests usually heal a partition while keeping the network lossy.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.groups = nil
	clear(n.isolated)
	clear(n.blocked)
}

// SetDropRate makes each envelope lost with probability p (clamped to [0, 1]).
func (n *Network) SetDropRate(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropRate = clamp01(p)
}

// SetDuplicateRate makes each envelope delivered twice with probability p.
func (n *Network) SetDuplicateRate(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dupRate = clamp01(p)
}

// SetReorderRate lets each envelope, with probability p, overtake
// envelopes sent earlier on the same link that have not been delivered
// yet. It only shows when envelopes queue up, so pair it with SetDelay or
// a slow receiver.
func (n *Network) SetReorderRate(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reorderRate = clamp01(p)
}

// SetDelay delays each envelope by a uniform random duration in
// [lo, hi]. Delays keep each link FIFO unless reordering is on. A hi
// below lo is taken as lo; zero for both turns delay off.
func (n *Network) SetDelay(lo, hi time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	lo = max(lo, 0)
	n.minDelay, n.maxDelay = lo, max(lo, hi)
}

// Inject is test-only fault injection: it plays an attacker who can put
// any envelope on the wire. It hands env, exactly as given (From
// included, unlike Send, which always stamps the sender's real name), to
// the inbox of the member named env.To, bypassing every fault and the
// counters. It never blocks: it reports false when env.To is unknown or
// closed, or its inbox is full. Data is copied.
func (n *Network) Inject(env Envelope) bool {
	n.mu.Lock()
	to := n.members[env.To]
	closed := n.closed
	n.mu.Unlock()
	if to == nil || closed {
		return false
	}
	env.Data = slices.Clone(env.Data)
	to.mu.RLock()
	defer to.mu.RUnlock()
	if to.closed {
		return false
	}
	select {
	case to.recv <- env:
		return true
	default:
		return false
	}
}

// Stats returns a snapshot of the network's counters.
func (n *Network) Stats() NetworkStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

func clamp01(p float64) float64 {
	return min(max(p, 0), 1)
}

// reachableLocked reports whether connectivity faults let from talk to to.
func (n *Network) reachableLocked(from, to string) bool {
	if n.blocked[linkKey{from, to}] {
		return false
	}
	if from == to {
		return true
	}
	if n.isolated[from] || n.isolated[to] {
		return false
	}
	if n.groups != nil {
		gf, okf := n.groups[from]
		gt, okt := n.groups[to]
		if !okf || !okt || gf != gt {
			return false
		}
	}
	return true
}

// send applies the faults to one envelope and queues what survives,
// reporting whether it (or a duplicate) was queued. Data
// is copied here because the sender may reuse its buffer once Send
// returns; each duplicate gets its own copy because receivers own Data.
// From is overwritten with the sender's real name whatever the caller
// put there: receivers may trust it, as they may trust the TCP
// transport's authenticated sender (invariant 11 in ARCHITECTURE.md).
func (n *Network) send(from string, env Envelope) bool {
	env.From = from
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stats.Sent++
	to := n.members[env.To]
	if n.closed || to == nil || !n.reachableLocked(from, env.To) {
		n.stats.Dropped++
		return false
	}
	copies := 1
	// Draw every decision for this envelope, in a fixed order, whatever
	// the outcome: a decision skipped on one path would shift every later
	// draw and break determinism across runs.
	drop := n.rng.Float64() < n.dropRate
	if n.rng.Float64() < n.dupRate {
		copies = 2
	}
	if drop {
		n.stats.Dropped++
		return false
	}
	if copies == 2 {
		n.stats.Duplicated++
	}
	l := n.linkLocked(linkKey{from, env.To})
	queued := false
	for range copies {
		e := env
		e.Data = slices.Clone(env.Data)
		queued = n.enqueueLocked(l, pending{env: e, to: to}) || queued
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return queued
}

// enqueueLocked queues p on l, reporting false when the queue is full.
func (n *Network) enqueueLocked(l *memLink, p pending) bool {
	// Draw first, a fixed number of times: queue lengths depend on
	// scheduling, and must not change which draws happen.
	now := time.Now()
	at := now
	if n.maxDelay > 0 {
		at = now.Add(n.minDelay + time.Duration(n.rng.Float64()*float64(n.maxDelay-n.minDelay+1)))
	}
	overtake, pos := false, 0.0
	if n.reorderRate > 0 {
		overtake = n.rng.Float64() < n.reorderRate
		pos = n.rng.Float64()
	}
	if len(l.queue) >= memLinkQueue {
		n.stats.Dropped++
		return false
	}
	if overtake && len(l.queue) > 0 {
		// Jump ahead of some earlier envelopes and keep our own deliver
		// time rather than waiting behind theirs.
		i := int(pos * float64(len(l.queue)+1))
		p.at = at
		l.queue = slices.Insert(l.queue, i, p)
		if at.After(l.last) {
			l.last = at
		}
		return true
	}
	if at.Before(l.last) {
		at = l.last
	}
	l.last = at
	p.at = at
	l.queue = append(l.queue, p)
	return true
}

// linkLocked returns the link for k, starting its goroutine on first use.
func (n *Network) linkLocked(k linkKey) *memLink {
	l := n.links[k]
	if l == nil {
		l = &memLink{key: k, wake: make(chan struct{}, 1)}
		n.links[k] = l
		n.wg.Go(func() { n.runLink(l) })
	}
	return l
}

// runLink delivers a link's queue in order, each envelope at its time.
// Blocking on a slow receiver here is the intended backpressure: it fills
// this link's queue, and then Send drops.
func (n *Network) runLink(l *memLink) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		n.mu.Lock()
		if len(l.queue) == 0 {
			n.mu.Unlock()
			select {
			case <-l.wake:
				continue
			case <-n.done:
				return
			}
		}
		head := l.queue[0]
		if wait := time.Until(head.at); wait > 0 {
			n.mu.Unlock()
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.wake: // a reordered envelope may now be at the head
				timer.Stop()
			case <-n.done:
				return
			}
			continue
		}
		l.queue[0] = pending{}
		l.queue = l.queue[1:]
		if len(l.queue) == 0 {
			l.queue = nil // let the backing array go
		}
		ok := n.reachableLocked(l.key.from, l.key.to)
		if !ok {
			// Faults also apply to envelopes already in flight, so a
			// partition takes effect at once.
			n.stats.Dropped++
		}
		n.mu.Unlock()
		if ok {
			delivered := head.to.deliver(head.env, n.done)
			n.mu.Lock()
			if delivered {
				n.stats.Delivered++
			} else {
				n.stats.Dropped++
			}
			n.mu.Unlock()
		}
	}
}

// memTransport is one member's view of a Network.
type memTransport struct {
	net  *Network
	name string
	recv chan Envelope // buffered memRecvBuffer; closed by Close, after every deliverer has left
	done chan struct{} // closed first by Close, to release deliverers blocked on recv

	// mu makes close(recv) wait for deliverers: they hold it shared while
	// sending on recv, Close takes it exclusively.
	mu        sync.RWMutex
	closed    bool
	closeOnce sync.Once

	// Freezing (Network.Pause): changed is closed and replaced at each
	// change of frozen.
	freezeMu  sync.Mutex
	frozen    bool
	changed   chan struct{}
	following bool          // a member follows Frozen, so freezing waits for it
	settled   chan struct{} // closed by Settled for the current state

	traffic memTraffic // for Stats (stats.go)
}

var (
	_ Freezer       = (*memTransport)(nil)
	_ StatsReporter = (*memTransport)(nil)
)

// Send queues envs for delivery; see Transport. From is always this
// member's name.
func (t *memTransport) Send(envs []Envelope) error {
	t.mu.RLock()
	closed := t.closed
	t.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	for _, env := range envs {
		if t.net.send(t.name, env) {
			t.traffic.peer(env.To).out(len(env.Data))
		} else {
			t.traffic.dropped.Add(1)
		}
	}
	return nil
}

// Receive returns the member's inbox: buffered, closed after Close.
func (t *memTransport) Receive() <-chan Envelope { return t.recv }

// Close closes the transport; envelopes in flight to it are dropped.
func (t *memTransport) Close() error {
	t.closeOnce.Do(func() {
		close(t.done)
		t.mu.Lock()
		t.closed = true
		close(t.recv)
		t.mu.Unlock()
		t.net.mu.Lock()
		if t.net.members[t.name] == t {
			delete(t.net.members, t.name)
		}
		t.net.mu.Unlock()
		// A frozen member would never see its transport close: a closed
		// transport thaws it (nothing it sends goes anywhere now), as
		// kill -9 ends a stopped process too.
		t.setFrozen(false)
	})
	return nil
}

// deliver hands env to the receiver, waiting while its inbox is full. It
// reports false if the transport or the network closed first.
func (t *memTransport) deliver(env Envelope, netDone <-chan struct{}) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return false
	}
	// Counted before delivery, so whoever receives it sees it counted (a
	// frame lost to a closing transport counts as received here).
	t.traffic.peer(env.From).in(len(env.Data))
	select {
	case t.recv <- env:
		return true
	case <-t.done:
		return false
	case <-netDone:
		return false
	}
}
