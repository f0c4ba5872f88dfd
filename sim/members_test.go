package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/coordcell/coord"
)

// impaired is what the fault loop has done to members that it must
// undo: crashed members, paused ones, and those whose disk fails (each
// also counted in down: it stops, or will, at its next write).
type impaired struct {
	down, paused map[int]bool
	disk         map[int]bool
}

// maxDown bounds the members crashed or with a failing disk at once:
// two of five (or six) leave a quorum running.
const maxDown = 2

// changeMembers adds a member (a learner joins, catches up and is
// promoted) or removes one drawn at random, the leader too, keeping
// four to six voters: over two faults, a replacement. Each step is bounded; one that fails leaves the cell as
// it is, and healAll settles what is left (reconcileMembers).
func (h *history) changeMembers(rng *rand.Rand, im *impaired) {
	c := h.c
	live := h.liveMembers()
	if len(live) < members || len(live) == members && rng.IntN(2) == 0 {
		if *addWhenReady {
			h.readyToAdd(im)
		}
		h.mu.Lock()
		name := fmt.Sprintf("n%d", members+h.added)
		h.added++
		h.mu.Unlock()
		via := h.runningNode(rng)
		if via == nil {
			return
		}
		h.logf("add learner %s", name)
		h.mu.Lock()
		h.unstarted[name] = true
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := via.Admin().AddLearner(ctx, name, name)
		cancel()
		if err != nil {
			// It may yet be added (reconcileMembers removes it again),
			// but no member of that name will start.
			h.logf("add learner %s: %v", name, err)
			return
		}
		i := c.Join(name)
		if i != len(h.gone) {
			h.t.Fatalf("seed %d: member %s has index %d, want %d", h.seed, name, i, len(h.gone))
		}
		h.mu.Lock()
		delete(h.unstarted, name)
		h.gone = append(h.gone, false)
		h.mu.Unlock()
		h.mu.Lock()
		h.done.joins++
		h.mu.Unlock()
		if h.promote(i, opTimeout*3) && *addWhenReady {
			h.awaitKnown(name)
		}
		return
	}
	victim := live[rng.IntN(len(live))]
	via := h.runningNode(rng)
	if via == nil {
		return
	}
	h.logf("remove %s", c.Name(victim))
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := via.Admin().RemoveMember(ctx, c.Name(victim))
	cancel()
	if err != nil {
		h.logf("remove %s: %v", c.Name(victim), err)
		return
	}
	h.mu.Lock()
	h.done.removals++
	h.mu.Unlock()
	h.retire(victim, im)
}

// readyToAdd is the schedule of -addwhenready. It worked around a
// liveness bug, now fixed (raftnode/strangers.go): a member that had not
// applied the addition of a member dropped every message from it (the
// sender was not in its address book), so if the new member led, it
// never caught up. A member is then added only while every member runs
// and hears the others: this restarts those down, resumes those paused
// and heals the network; awaitKnown then waits until all have applied
// the addition, before the next fault.
func (h *history) readyToAdd(im *impaired) {
	c := h.c
	for len(im.down) > 0 {
		h.restartOne(im)
	}
	for _, i := range h.liveMembers() {
		if im.paused[i] {
			h.logf("resume %s", c.Name(i))
			c.Resume(i)
			delete(im.paused, i)
		}
	}
	h.logf("heal the network to add a member")
	c.Heal()
	c.SetDropRate(0)
	c.SetDelay(0, 0)
}

// awaitKnown waits until every member has applied what the cell had
// committed once name was promoted (its addition among it), so that
// each knows it before a fault can cut one off (readyToAdd).
func (h *history) awaitKnown(name string) {
	c := h.c
	deadline := time.Now().Add(settleBound)
	target := uint64(0)
	for _, i := range h.liveMembers() {
		if n := c.Node(i); n != nil {
			target = max(target, n.Status().Commit)
		}
	}
	for {
		behind := ""
		for _, i := range h.liveMembers() {
			if n := c.Node(i); n != nil && n.Err() == nil && n.Status().Applied < target {
				behind = c.Name(i)
			}
		}
		if behind == "" {
			return
		}
		if time.Now().After(deadline) {
			h.fail("%s had not applied index %d (the addition of %s) %v after it, on a whole network", behind, target, name, settleBound)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// promote makes joined member i a voter, trying until it has caught up
// or bound passes; it reports whether it did.
func (h *history) promote(i int, bound time.Duration) bool {
	c := h.c
	deadline := time.Now().Add(bound)
	for {
		err := errors.New("no member running")
		if n := c.Node(i); n != nil && n.Err() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			err = n.Admin().Promote(ctx, c.Name(i))
			cancel()
		}
		if err == nil {
			h.logf("promoted %s", c.Name(i))
			return true
		}
		if time.Now().After(deadline) {
			h.logf("promote %s: %v", c.Name(i), err)
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// retire takes removed member i out of the history: it must stop by
// itself with ErrRemoved (if it runs and can hear the cell, which it may
// not yet), then it is stopped for good.
func (h *history) retire(i int, im *impaired) {
	c := h.c
	if n := c.Node(i); n != nil {
		select {
		case <-n.Done():
			if err := n.Err(); !errors.Is(err, coord.ErrRemoved) && !h.diskFailed(i, im) {
				h.fail("removed member %s stopped with %v, want ErrRemoved", c.Name(i), err)
			}
		case <-time.After(opTimeout):
			// Cut off, paused, or its removal not yet heard: checked at
			// the end (checkRemovedMemberStops) where the network is whole.
		}
	}
	c.Retire(i)
	h.mu.Lock()
	h.gone[i] = true
	h.mu.Unlock()
	if im != nil {
		delete(im.down, i)
		delete(im.paused, i)
		delete(im.disk, i)
	}
}

func (h *history) diskFailed(i int, im *impaired) bool { return im != nil && im.disk[i] }

// failDisk makes member i's disk fail every write and sync: an I/O
// error or a full disk. The member must stop at its next write (its
// Err wraps ErrInternal), having acknowledged only what it synced; the
// checks over the history see anything else as a lost write. A later
// restart (restartOne, healAll) heals the disk, crashes the member on
// what it synced and reopens it.
func (h *history) failDisk(rng *rand.Rand, im *impaired) {
	c := h.c
	var running []int
	for _, i := range h.liveMembers() {
		if c.Node(i) != nil && !im.down[i] {
			running = append(running, i)
		}
	}
	if len(running) == 0 || len(im.down) >= maxDown {
		h.restartOne(im)
		return
	}
	i := running[rng.IntN(len(running))]
	var err error = syscall.EIO
	what := "fail"
	if rng.IntN(2) == 0 {
		err, what = &os.PathError{Op: "write", Path: c.Name(i), Err: syscall.ENOSPC}, "fill"
	}
	h.logf("%s the disk of %s", what, c.Name(i))
	c.FailDisk(i, err)
	im.down[i], im.disk[i] = true, true
	h.mu.Lock()
	h.done.disks++
	h.mu.Unlock()
}

// healDisk brings member i back from a failing disk: the disk healed,
// the member crashed on what it had synced (it may have stopped already:
// its store faulted; or not, if it wrote nothing meanwhile), reopened.
func (h *history) healDisk(i int, im *impaired) {
	c := h.c
	c.FailDisk(i, nil)
	if n := c.Node(i); n != nil {
		select {
		case <-n.Done():
			err := n.Err()
			h.logf("%s had stopped on its failing disk: %v", c.Name(i), err)
			if !errors.Is(err, coord.ErrInternal) && !errors.Is(err, coord.ErrRemoved) {
				h.fail("%s stopped on its failing disk with %v, want ErrInternal", c.Name(i), err)
			}
		default:
			h.logf("%s still runs on its failing disk (it wrote nothing since)", c.Name(i))
		}
		c.Crash(i)
	}
	delete(im.disk, i)
}

// liveMembers are the indices of the members in the cell, in order.
func (h *history) liveMembers() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for i, gone := range h.gone {
		if !gone {
			out = append(out, i)
		}
	}
	return out
}

// runningNode is a member drawn at random among those running, or nil.
func (h *history) runningNode(rng *rand.Rand) *coord.Node {
	var nodes []*coord.Node
	for _, i := range h.liveMembers() {
		if n := h.c.Node(i); n != nil && n.Err() == nil {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	return nodes[rng.IntN(len(nodes))]
}

// reconcileMembers, once the network is whole and every member runs,
// settles the membership changes left half done: a member the cell no
// longer lists is retired (its removal went through after its call
// failed), a learner is promoted; each within settleBound.
func (h *history) reconcileMembers() {
	c := h.c
	leader := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), settleBound)
	defer cancel()
	var ms []coord.Member
	var err error
	for {
		if ms, err = leader.Admin().Members(ctx); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
		leader = c.Leader()
	}
	if err != nil {
		h.fail("after the heal, the members could not be listed: %v", err)
		return
	}
	listed := map[string]coord.Member{}
	for _, m := range ms {
		listed[m.Name] = m
	}
	for _, i := range h.liveMembers() {
		m, ok := listed[c.Name(i)]
		switch {
		case !ok:
			h.logf("%s is no longer a member", c.Name(i))
			h.retire(i, nil)
		case m.Learner:
			if !h.promote(i, settleBound) {
				h.fail("after the heal, learner %s was not promoted within %v", c.Name(i), settleBound)
			}
		}
	}
	live := h.liveMembers()
	for name := range listed {
		if slices.ContainsFunc(live, func(i int) bool { return c.Name(i) == name }) {
			continue
		}
		h.mu.Lock()
		unstarted := h.unstarted[name]
		h.mu.Unlock()
		if !unstarted {
			h.fail("the cell lists %s, which the history removed (acknowledged) or never added", name)
			continue
		}
		// An AddLearner that failed and went through after all.
		h.logf("remove %s, added by a call that failed", name)
		if err := leader.Admin().RemoveMember(ctx, name); err != nil {
			h.fail("after the heal, removing learner %s failed: %v", name, err)
		}
	}
}
