package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"
)

// runFaults impairs the cell until ctx ends (the history's length)
// with one fault every 0.4 to 2.2 s of virtual time drawn from rng: an
// isolation, a partition, a crash or a failing disk (at most two members
// down at once) or a restart, a pause of a member's Raft traffic or a
// resume, a client cut from its member, message loss or delay, a member
// added or removed, or a heal of the network.
func (h *history) runFaults(ctx context.Context, rng *rand.Rand) *impaired {
	im := &impaired{down: map[int]bool{}, paused: map[int]bool{}, disk: map[int]bool{}}
	for done := 0; ; done++ {
		gap := time.Duration(400+rng.IntN(1800)) * time.Millisecond
		select {
		case <-ctx.Done():
			if done >= minFaults {
				return im
			}
			// A join waits for its learner to catch up (up to three op
			// timeouts), and three of a thousand histories had fewer
			// than ten faults in thirty seconds: the faults (and the
			// workload) go on to ten.
			h.logf("fault %d of %d past the history's length", done+1, minFaults)
			time.Sleep(gap)
		case <-time.After(gap):
		}
		h.fault(rng, im)
		h.mu.Lock()
		h.done.faults++
		h.mu.Unlock()
	}
}

func (h *history) fault(rng *rand.Rand, im *impaired) {
	c := h.c
	live := h.liveMembers()
	i := live[rng.IntN(len(live))]
	switch rng.IntN(12) {
	case 0, 1:
		h.logf("isolate %s", c.Name(i))
		c.Isolate(i)
	case 2:
		perm := rng.Perm(len(live))
		cut := 1 + rng.IntN(2)
		var a, b []int
		for k, p := range perm {
			if k < cut {
				a = append(a, live[p])
			} else {
				b = append(b, live[p])
			}
		}
		h.logf("partition %v | %v", a, b)
		c.Partition(a, b)
	case 3, 4:
		if im.down[i] || len(im.down) >= maxDown {
			h.restartOne(im)
			return
		}
		h.logf("crash %s", c.Name(i))
		c.Crash(i)
		im.down[i] = true
	case 5:
		h.restartOne(im)
	case 6:
		if im.paused[i] {
			h.logf("resume %s", c.Name(i))
			c.Resume(i)
			delete(im.paused, i)
			return
		}
		h.logf("pause %s", c.Name(i))
		c.Pause(i)
		im.paused[i] = true
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
	case 9:
		h.changeMembers(rng, im)
	case 10:
		h.failDisk(rng, im)
	default:
		h.logf("heal the network")
		c.Heal()
		c.SetDropRate(0)
		c.SetDelay(0, 0)
	}
}

// restartOne restarts the lowest-numbered member that is down (crashed,
// or on a failing disk: healed first), if any.
func (h *history) restartOne(im *impaired) {
	if len(im.down) == 0 {
		return
	}
	i := slices.Min(slices.Collect(func(yield func(int) bool) {
		for i := range im.down {
			if !yield(i) {
				return
			}
		}
	}))
	h.restart(i, im)
}

func (h *history) restart(i int, im *impaired) {
	if im.disk[i] {
		h.healDisk(i, im)
	}
	h.logf("restart %s", h.c.Name(i))
	h.c.Restart(i)
	delete(im.down, i)
}

// healAll ends every fault: the network whole, every member running and
// unpaused, every disk working, the membership settled.
func (h *history) healAll(im *impaired) {
	c := h.c
	c.Heal()
	c.SetDropRate(0)
	c.SetDelay(0, 0)
	for _, i := range h.liveMembers() {
		c.Resume(i)
		if im.down[i] {
			h.restart(i, im)
		} else if !c.Running(i) {
			c.Restart(i)
		}
	}
	h.reconcileMembers()
}
