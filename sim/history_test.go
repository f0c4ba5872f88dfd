package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/fence"
	"github.com/coordcell/coord/internal/histcheck"
)

const (
	members = 5
	// clients connect to the cell; the first also holds the watch.
	clients = 3
	// The members' timing: a 100 ms tick and a one-second election
	// timeout (coordtest's is 200 ms). What a member does per virtual
	// second (ticks, heartbeats, keepalives, its client guard's checks)
	// scales with the election timeout: half the ticks of a 50 ms tick
	// cut about a fifth of a history's cost under the race detector.
	// Still thirty election timeouts of faults in thirty seconds.
	tick            = 100 * time.Millisecond
	electionTicks   = 10
	heartbeatTicks  = 3
	electionTimeout = electionTicks * tick
	// settleBound is the liveness bound: once every fault has healed,
	// the cell must have a leader, every call must return, the watch
	// must catch up and a removed member must stop within it (virtual
	// time; 20 election timeouts).
	settleBound = 20 * electionTimeout
	// opTimeout is each workload call's context while faults run: long
	// enough for a client to move to another member (its member ends
	// the connection after two election timeouts of not serving).
	opTimeout = 3 * electionTimeout
	// minFaults is the fewest faults of a history (issue 25).
	minFaults = 10
)

// TestHistories runs the seeded histories (see the package doc).
func TestHistories(t *testing.T) {
	seeds := historySeeds(t)
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { runHistory(t, seed) })
		})
	}
}

// historySeeds is the one seed of -seed, or -seeds of them from a base
// drawn at random and logged.
func historySeeds(t *testing.T) []int64 {
	if *oneSeed != 0 {
		return []int64{*oneSeed}
	}
	n := *seedCount
	if n == 0 {
		n = defaultSeeds
	}
	base := *seedBase
	if base == 0 {
		base = rand.Int64N(1 << 40)
	}
	t.Logf("%d histories, seeds %d to %d", n, base, base+int64(n)-1)
	out := make([]int64, n)
	for i := range out {
		out[i] = base + int64(i)
	}
	return out
}

// history is one run: the cell, what the workload recorded, and the
// trace printed when a check fails.
type history struct {
	t     *testing.T
	seed  int64
	c     *coordtest.Cluster
	start time.Time
	cls   []*coord.Client
	fence *fence.Fence
	keys  keyRing

	mu        sync.Mutex
	ops       []porcupine.Operation
	acked     map[putID]bool // acknowledged puts, for the watch
	holds     map[fence.Token]int
	admitted  fence.Token
	trace     []string
	ambiguous map[string]int // why writes ended ambiguous
	dropped   []string       // writes left out as certainly not applied, for the report
	// gone[i]: member i was removed from the cell (and retired); the
	// slice grows as members join.
	gone []bool
	// unstarted are members added by an AddLearner that failed, and so
	// never started.
	unstarted map[string]bool
	added     int // members added, or tried to be: the next one's name
	done      struct{ ops, writes, holds, faults, joins, removals, disks int }
}

type putID struct {
	key string
	rev int64
}

func (h *history) logf(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", time.Since(h.start).Seconds()) + fmt.Sprintf(format, args...)
	if *oneSeed != 0 {
		h.t.Log(line) // a replay shows its trace as it goes
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trace = append(h.trace, line)
}

// fail reports a violated property, naming the seed.
func (h *history) fail(format string, args ...any) {
	h.t.Helper()
	h.logf("VIOLATION: "+format, args...)
	h.t.Errorf("seed %d: "+format, append([]any{h.seed}, args...)...)
}

func runHistory(t *testing.T, seed int64) {
	h := &history{t: t, seed: seed, start: time.Now(), fence: fence.NewFence(fence.NewMemMarks()),
		acked: map[putID]bool{}, holds: map[fence.Token]int{}, ambiguous: map[string]int{},
		gone: make([]bool, members), unstarted: map[string]bool{}}
	defer func() {
		if t.Failed() {
			h.mu.Lock()
			t.Logf("trace of seed %d:\n%s", seed, strings.Join(h.trace, "\n"))
			h.mu.Unlock()
			t.Logf("replay: go test ./sim/ -run TestHistories -seed %d -v", seed)
		}
	}()
	h.c = coordtest.NewCluster(t, members, coordtest.WithSeed(seed), coordtest.WithClients(),
		coordtest.WithWaitTimeout(settleBound), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
			cfg.TickInterval, cfg.ElectionTicks, cfg.HeartbeatTicks = tick, electionTicks, heartbeatTicks
		}))
	for range 8 {
		h.keys.add()
	}
	h.c.Leader()
	for i := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), settleBound)
		cl, err := h.c.Connect(ctx)
		cancel()
		if err != nil {
			t.Fatalf("seed %d: connect client %d: %v", seed, i, err)
		}
		h.cls = append(h.cls, cl)
	}
	length := 30 * time.Second
	if *virtual > 0 {
		length = *virtual
	}
	ctx, cancel := context.WithTimeout(context.Background(), length)
	defer cancel()
	// The workload runs as long as the faults, which may outlast length
	// (runFaults).
	work, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	w := h.startWatch()
	var wg sync.WaitGroup
	for i := range 5 {
		wrng := rand.New(rand.NewPCG(uint64(seed), uint64(100+i)))
		wg.Go(func() { h.kvWorker(work, i, wrng) })
	}
	for i := range 3 {
		wrng := rand.New(rand.NewPCG(uint64(seed), uint64(200+i)))
		wg.Go(func() { h.lockWorker(work, i, wrng) })
	}
	im := h.runFaults(ctx, rand.New(rand.NewPCG(uint64(seed), 1)))
	stopWork()
	wg.Wait()
	h.healAll(im)
	h.logf("healed; checking liveness")

	h.checkLiveness(w)
	w.stop()
	h.checkLinearizable()
	h.checkWatch(w)
	h.mu.Lock()
	t.Logf("seed %d: %d faults (%d members added, %d removed, %d disks failed); %d operations (%d writes acknowledged), %d fenced holds; ambiguous: %v",
		seed, h.done.faults, h.done.joins, h.done.removals, h.done.disks, h.done.ops, h.done.writes, h.done.holds, h.ambiguous)
	h.mu.Unlock()
	if h.done.faults < minFaults {
		t.Errorf("seed %d: only %d faults in %v", seed, h.done.faults, length)
	}
}

// checkLinearizable checks the key-value history of members and clients.
func (h *history) checkLinearizable() {
	h.mu.Lock()
	ops := h.ops
	h.mu.Unlock()
	verdict, file := histcheck.Check(ops, time.Minute, fmt.Sprintf("sim-%d", h.seed))
	switch verdict {
	case histcheck.NotLinearizable:
		h.fail("the key-value history (%d operations) is not linearizable (visualisation: %s)", len(ops), file)
		h.t.Logf("seed %d: the first key whose history is not linearizable, in µs of virtual time:\n%s",
			h.seed, strings.Join(histcheck.Failing(ops, time.Minute), "\n"))
		h.mu.Lock()
		h.t.Logf("seed %d: writes left out of the history as certainly not applied:\n%s", h.seed, strings.Join(h.dropped, "\n"))
		h.mu.Unlock()
	case histcheck.Undecided:
		h.fail("the linearizability check of %d operations ran out of time", len(ops))
	}
}

// keyRing is the set of keys in use, each retired for a fresh one after
// a few ambiguous writes: each stays open to the end of its key's
// history, and the checker's work grows steeply with the open writes of
// a key.
type keyRing struct {
	mu    sync.Mutex
	live  []string
	amb   map[string]int
	count int
}

const maxAmbiguousPerKey = 4

func (r *keyRing) add() {
	r.live = append(r.live, fmt.Sprintf("key/%d", r.count))
	r.count++
}

func (r *keyRing) pick(rng *rand.Rand) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[rng.IntN(len(r.live))]
}

func (r *keyRing) ambiguous(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.amb == nil {
		r.amb = map[string]int{}
	}
	r.amb[key]++
	if r.amb[key] != maxAmbiguousPerKey {
		return
	}
	for i, k := range r.live {
		if k == key {
			r.live = append(r.live[:i], r.live[i+1:]...)
			r.add()
			return
		}
	}
}
