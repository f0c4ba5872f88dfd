package coord_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestLockSafetyUnderFaults runs workers on all members of a 5-member
// cell that take one Mutex in a loop and, while holding, write to a
// counter guarded by a Fence, while a nemesis partitions, isolates,
// crashes and restarts members (at most two impaired at a time, so a
// majority can always grant the lock), and holders pause (their member
// cut off, touching nothing) for longer than their TTL, then write as if
// they still held the lock.
//
// It checks invariant 1 from both sides (the two holders after a network
// blip of etcd#10811): the Fence never admits a token lower than one it
// admitted before (also checked by an independent high-water mark), and
// every paused holder whose lock passed on is refused; and, replaying the
// lock's history from the cell, every token Lock returned belonged to the
// entry at the head of the queue at some revision, so no two holders ever
// held at the same revision.
//
// Short by default; -soak=5m or COORD_SOAK=5m runs it longer. The seed is
// logged; coordtest.WithSeed replays the network's randomness (the
// schedule of goroutines is not replayable).
func TestLockSafetyUnderFaults(t *testing.T) {
	t.Parallel()
	seed := rand.Int64()
	t.Logf("seed %d", seed)
	duration := soakDuration(2500 * time.Millisecond) // the simulator (sim/) runs these faults at length
	c := coordtest.NewCluster(t, 5, coordtest.WithSeed(seed), coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		// The replay at the end reads the lock's whole history.
		cfg.HistoryRevisions = max(100_000, int64(duration/time.Second)*10_000)
	}))
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	const (
		name     = "fault"
		resource = "counter"
		ttl      = time.Second
		workers  = 6
	)
	fence := coord.NewFence(nil)

	var (
		mu           sync.Mutex
		high         coord.Token // the highest token the counter accepted
		counter      int
		violations   []string
		grants       []coord.Token
		staleRefused int // writes the fence refused
		takeovers    int // pauses during which the lock passed on
		raised       = make(chan struct{})
	)
	write := func(tok coord.Token) error {
		return fence.Do(context.Background(), resource, tok, func() error {
			mu.Lock()
			defer mu.Unlock()
			if tok < high {
				violations = append(violations, fmt.Sprintf("token %d admitted after %d", tok, high))
			}
			if tok > high {
				high = tok
				close(raised)
				raised = make(chan struct{})
			}
			counter++
			return nil
		})
	}
	fencedWrite := func(tok coord.Token) {
		err := write(tok)
		switch {
		case errors.Is(err, coord.ErrStaleToken):
			mu.Lock()
			staleRefused++
			mu.Unlock()
		case err != nil:
			t.Errorf("fenced write: %v", err)
		}
	}

	// The nemesis and the pauses take turns: a pause needs a healthy
	// majority to take the lock over. The nemesis impairs (crashes, or
	// cuts off by a partition or isolation) at most two members at a
	// time, so a majority can always grant the lock: a run spent without a
	// quorum would test nothing.
	var nemesisMu sync.Mutex
	crashed := map[int]bool{}
	cut := map[int]bool{} // on the minority side of the network
	impaired := func(extra ...int) int {
		all := map[int]bool{}
		for i := range crashed {
			all[i] = true
		}
		for i := range cut {
			all[i] = true
		}
		for _, i := range extra {
			all[i] = true
		}
		return len(all)
	}
	healNet := func() {
		c.Heal()
		clear(cut)
	}
	healAll := func() {
		healNet()
		for i := range crashed {
			c.Restart(i)
			delete(crashed, i)
		}
	}

	// The run lasts duration, and then until it has enough to judge (20
	// grants and one takeover), up to a hard limit: on a busy machine the
	// same seconds hold fewer grants, and fewer grants prove less.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	enough := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(grants) >= 20 && takeovers > 0
	}
	go func() {
		defer cancel()
		hard := time.NewTimer(duration + time.Minute)
		defer hard.Stop()
		select {
		case <-time.After(duration):
		case <-hard.C:
			return
		}
		for !enough() {
			mu.Lock()
			wake := raised
			mu.Unlock()
			select {
			case <-wake:
			case <-hard.C:
				return
			}
		}
	}()
	var pauses atomic.Int32
	var lastPause atomic.Int64 // when the last pause ended, since start

	// pause: the holder's member is cut off and the holder does nothing
	// until another holder has written (which needs the cell to have
	// expired its session: more than a TTL) or the run ends; then it
	// writes with its old token.
	pause := func(member int, tok coord.Token) {
		nemesisMu.Lock()
		defer nemesisMu.Unlock()
		if c.Node(member) == nil {
			return
		}
		pauses.Add(1)
		defer func() { lastPause.Store(int64(time.Since(start))) }()
		healAll()
		c.Isolate(member)
		defer healNet()
		limit := time.NewTimer(6 * ttl)
		defer limit.Stop()
		for {
			mu.Lock()
			passed, wake := high > tok, raised
			mu.Unlock()
			if passed {
				break
			}
			select {
			case <-wake:
				continue
			case <-ctx.Done():
			case <-limit.C:
				t.Errorf("the lock did not pass on within %v of its holder's member being cut off (seed %d)", 6*ttl, seed)
			}
			return
		}
		mu.Lock()
		takeovers++
		mu.Unlock()
		if err := write(tok); !errors.Is(err, coord.ErrStaleToken) {
			t.Errorf("a paused holder's write with token %d after the lock passed on: %v, want ErrStaleToken", tok, err)
			return
		}
		mu.Lock()
		staleRefused++
		mu.Unlock()
	}

	pace := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wrng := rand.New(rand.NewPCG(uint64(seed), uint64(w)+100))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				member := wrng.IntN(c.Size())
				node := c.Node(member)
				if node == nil {
					pace(10 * time.Millisecond)
					continue
				}
				sctx, scancel := context.WithTimeout(ctx, time.Second)
				s, err := node.NewSession(sctx, coord.WithTTL(ttl))
				scancel()
				if err != nil {
					pace(10 * time.Millisecond)
					continue
				}
				m := coord.NewMutex(s, name)
				for ctx.Err() == nil && s.Err() == nil {
					tok, err := m.Lock(ctx)
					if err != nil {
						pace(10 * time.Millisecond)
						continue
					}
					if tok <= 0 {
						t.Errorf("Lock returned token %d", tok)
					}
					mu.Lock()
					grants = append(grants, tok)
					mu.Unlock()
					fencedWrite(tok)
					// Pause now and then (leaving the nemesis some time in
					// between), and at least once early in the run.
					sinceLast := time.Since(start) - time.Duration(lastPause.Load())
					if (wrng.IntN(10) == 0 && sinceLast > 2*ttl) || (pauses.Load() == 0 && time.Since(start) > duration/5) {
						pause(member, tok)
					}
					fencedWrite(tok)
					uctx, ucancel := context.WithTimeout(context.Background(), time.Second)
					_ = m.Unlock(uctx) // ErrNotHeld after a pause, or ambiguous: fine
					ucancel()
				}
				cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
				_ = s.Close(cctx)
				ccancel()
			}
		}()
	}

	// The nemesis. Once a fifth of the run has passed it leaves the cell
	// healthy until the first pause has happened, so every run has one.
	for ctx.Err() == nil {
		nemesisMu.Lock()
		action := rng.IntN(6)
		if pauses.Load() == 0 && time.Since(start) > duration/5 {
			action = 5
		}
		switch action {
		case 0, 1: // a new partition, or an isolation: one or two members cut off
			healNet()
			perm := rng.Perm(c.Size())
			minority := perm[:1+rng.IntN(2)]
			for impaired(minority...) > 2 {
				minority = minority[:len(minority)-1]
			}
			if len(minority) > 0 {
				c.Partition(minority, perm[len(minority):])
				for _, i := range minority {
					cut[i] = true
				}
			}
		case 2, 3:
			if i := rng.IntN(c.Size()); !crashed[i] && impaired(i) <= 2 {
				c.Crash(i)
				crashed[i] = true
			}
		default:
			healAll()
		}
		nemesisMu.Unlock()
		pace(time.Duration(100+rng.IntN(300)) * time.Millisecond)
	}
	wg.Wait()
	nemesisMu.Lock()
	healAll()
	nemesisMu.Unlock()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d grants, %d fenced writes accepted, %d refused as stale, %d pauses (%d with a takeover)",
		len(grants), counter, staleRefused, pauses.Load(), takeovers)
	require.Empty(t, violations, "the fence admitted a stale token (seed %d)", seed)
	require.GreaterOrEqual(t, len(grants), 20, "too few grants to say anything (seed %d)", seed)
	require.Positive(t, takeovers, "no pause saw its lock pass on (seed %d)", seed)

	// Replay the lock's history from the cell: the head of the queue
	// after each revision.
	heads := replayHeads(t, c, "locks/"+name+"/", seed)
	for _, g := range grants {
		if !heads[g] {
			t.Errorf("Lock returned token %d, which was never at the head of the queue: two holders at once (seed %d)", g, seed)
		}
	}
}

// replayHeads reads prefix's whole history on a member that still has it
// and returns the create revisions that were the lowest under prefix
// after some revision.
func replayHeads(t *testing.T, c *coordtest.Cluster, prefix string, seed int64) map[coord.Token]bool {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	marker, err := c.Leader().Put(ctx, prefix+"~end", nil) // not a queue key
	require.NoError(t, err)
	for i := range c.Size() {
		n := c.Node(i)
		if n == nil {
			continue
		}
		heads := map[coord.Token]bool{}
		queue := map[string]int64{}
		noteHead := func() {
			lowest := int64(0)
			for k, rev := range queue {
				if k != prefix+"~end" && (lowest == 0 || rev < lowest) {
					lowest = rev
				}
			}
			if lowest != 0 {
				heads[coord.Token(lowest)] = true
			}
		}
		w := n.Watch(ctx, prefix, coord.FromRev(0), coord.WithMaxLag(0))
		done := false
		for ev := range w.Events() {
			switch ev.Type {
			case coord.EventPut:
				queue[ev.KV.Key] = ev.KV.CreateRev
			case coord.EventDelete:
				delete(queue, ev.KV.Key)
			}
			if ev.EndOfRev {
				noteHead()
			}
			if ev.Rev >= marker.ModRev {
				done = true
				w.Close()
			}
		}
		if done {
			return heads
		}
		t.Logf("member %d cannot replay the history: %v", i, w.Err())
	}
	t.Fatalf("no member could replay the lock's history (seed %d)", seed)
	return nil
}
