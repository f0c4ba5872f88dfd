package sim

import (
	"context"
	"math/rand/v2"
	"time"
)

// runFaults impairs the cell until ctx ends (the history's length)
// with one fault every 0.4 to 2.2 s of virtual time drawn from rng: an
// isolation, a partition, a crash (at most two members down at once) or
// a restart, a pause of a member's Raft traffic or a resume, a client cut
// from its member, message loss or delay, or a heal of the network.
func (h *history) runFaults(ctx context.Context, rng *rand.Rand) {
	down, paused := map[int]bool{}, map[int]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(400+rng.IntN(1800)) * time.Millisecond):
		}
		h.fault(rng, down, paused)
		h.mu.Lock()
		h.done.faults++
		h.mu.Unlock()
	}
}

func (h *history) fault(rng *rand.Rand, down, paused map[int]bool) {
	c := h.c
	i := rng.IntN(c.Size())
	switch rng.IntN(10) {
	case 0, 1:
		h.logf("isolate %s", c.Name(i))
		c.Isolate(i)
	case 2:
		perm := rng.Perm(c.Size())
		cut := 1 + rng.IntN(2)
		h.logf("partition %v | %v", perm[:cut], perm[cut:])
		c.Partition(perm[:cut], perm[cut:])
	case 3, 4:
		if down[i] || len(down) >= 2 {
			h.restartOne(down)
			return
		}
		h.logf("crash %s", c.Name(i))
		c.Crash(i)
		down[i] = true
	case 5:
		h.restartOne(down)
	case 6:
		if paused[i] {
			h.logf("resume %s", c.Name(i))
			c.Resume(i)
			delete(paused, i)
			return
		}
		h.logf("pause %s", c.Name(i))
		c.Pause(i)
		paused[i] = true
	case 7:
		k := rng.IntN(len(h.cls))
		h.logf("cut client %d from its member", k)
		c.CutClient(h.cls[k])
	case 8:
		if rng.IntN(2) == 0 {
			p := []float64{0.05, 0.1, 0.3}[rng.IntN(3)]
			h.logf("lose %.0f%% of messages", p*100)
			c.SetDropRate(p)
		} else {
			hi := time.Duration(1+rng.IntN(50)) * time.Millisecond
			h.logf("delay messages up to %v", hi)
			c.SetDelay(0, hi)
		}
	default:
		h.logf("heal the network")
		c.Heal()
		c.SetDropRate(0)
		c.SetDelay(0, 0)
	}
}

// restartOne restarts one crashed member, if any.
func (h *history) restartOne(down map[int]bool) {
	for i := range down {
		h.logf("restart %s", h.c.Name(i))
		h.c.Restart(i)
		delete(down, i)
		return
	}
}

// healAll ends every fault: the network whole, every member running and
// unpaused.
func (h *history) healAll() {
	c := h.c
	c.Heal()
	c.SetDropRate(0)
	c.SetDelay(0, 0)
	for i := range c.Size() {
		c.Resume(i)
		if !c.Running(i) {
			c.Restart(i)
		}
	}
}
