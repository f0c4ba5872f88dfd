package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/coordcell/coord"
)

// watch is the client watch the history checks: every acknowledged put
// after its start, once, in revision order, across its client's
// failovers.
type watch struct {
	w      *coord.Watcher
	from   int64
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []coord.Event
	seen   chan struct{} // signalled on each event
}

func (h *history) startWatch() *watch {
	ctx, cancel := context.WithTimeout(context.Background(), settleBound)
	_, rev, err := h.cls[0].List(ctx, "key/")
	cancel()
	if err != nil {
		h.t.Fatalf("seed %d: list before the watch: %v", h.seed, err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	w := &watch{w: h.cls[0].Watch(wctx, "key/", coord.FromRev(rev)), from: rev, cancel: wcancel,
		done: make(chan struct{}), seen: make(chan struct{}, 1)}
	go func() {
		defer close(w.done)
		for ev := range w.w.Events() {
			if ev.Type == coord.EventProgress {
				continue
			}
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
			select {
			case w.seen <- struct{}{}:
			default:
			}
		}
	}()
	return w
}

func (w *watch) stop() {
	w.cancel()
	<-w.done
}

// waitRev waits until the watch has delivered an event at rev or later,
// or the bound passes.
func (w *watch) waitRev(rev int64, bound time.Duration) bool {
	deadline := time.After(bound)
	for {
		w.mu.Lock()
		n := len(w.events)
		last := int64(0)
		if n > 0 {
			last = w.events[n-1].Rev
		}
		w.mu.Unlock()
		if last >= rev {
			return true
		}
		select {
		case <-w.seen:
		case <-w.done:
			return false
		case <-deadline:
			return false
		}
	}
}

// checkWatch: revisions in order, no change twice, and every
// acknowledged put after the watch's start up to its last event there.
func (h *history) checkWatch(w *watch) {
	w.mu.Lock()
	events := w.events
	w.mu.Unlock()
	seen := map[putID]bool{}
	var last int64
	for _, ev := range events {
		if ev.Rev < last {
			h.fail("watch: revision %d after %d", ev.Rev, last)
			return
		}
		last = ev.Rev
		id := putID{ev.KV.Key, ev.KV.ModRev}
		if seen[id] {
			h.fail("watch: %s at revision %d delivered twice", id.key, id.rev)
			return
		}
		seen[id] = true
	}
	missed := 0
	var first putID
	h.mu.Lock()
	for id := range h.acked {
		if id.rev > w.from && id.rev <= last && !seen[id] {
			if missed == 0 || id.rev < first.rev {
				first = id
			}
			missed++
		}
	}
	h.mu.Unlock()
	if missed > 0 {
		h.fail("watch: %d acknowledged puts after its start (revision %d) not delivered, the first %s at %d",
			missed, w.from, first.key, first.rev)
	}
}

// checkLiveness checks, after the last fault has healed, that every
// call returns within settleBound: a leader, a write through every
// member and client, the watch caught up; then that each client's fresh
// session outlives a crash of the leader (a holder that keeps its
// session alive is never expired by a leader change); then that a
// removed member stops by itself.
func (h *history) checkLiveness(w *watch) {
	c := h.c
	start := time.Now()
	c.Leader()
	if d := time.Since(start); d > settleBound {
		h.fail("no leader until %v after the heal", d)
	}
	var cells []coord.Cell
	var names []string
	var idx []int // the member's index, -1 for a client
	for _, i := range h.liveMembers() {
		cells, names, idx = append(cells, c.Node(i)), append(names, c.Name(i)), append(idx, i)
	}
	for i, cl := range h.cls {
		cells, names, idx = append(cells, cl), append(names, "client "+string(rune('0'+i))), append(idx, -1)
	}
	var last int64
	for i, cell := range cells {
		ctx, cancel := context.WithTimeout(context.Background(), 6*settleBound)
		t0 := time.Now()
		kv, err := cell.Put(ctx, "key/end", []byte(names[i]))
		// A member that has not heard the leader since the heal says so
		// at once (ErrNoQuorum: certainly not applied), as it does when
		// cut off; within the bound it must have heard it.
		for errors.Is(err, coord.ErrNoQuorum) && !errors.Is(err, coord.ErrAmbiguous) && time.Since(t0) < settleBound {
			time.Sleep(20 * time.Millisecond)
			kv, err = cell.Put(ctx, "key/end", []byte(names[i]))
		}
		cancel()
		d := time.Since(t0)
		switch {
		case err != nil:
			h.fail("after the heal, a put through %s failed after %v: %v (%s)", names[i], d, err, h.describe(idx[i]))
		case d > settleBound:
			h.fail("after the heal, a put through %s took %v", names[i], d)
		default:
			h.mu.Lock()
			h.acked[putID{"key/end", kv.ModRev}] = true
			h.mu.Unlock()
			last = max(last, kv.ModRev)
		}
	}
	if last > 0 && !w.waitRev(last, settleBound) {
		h.fail("the watch did not reach revision %d within %v of the heal's last put (its error: %v)", last, settleBound, w.w.Err())
	}
	h.checkSessionsSurviveLeaderCrash()
	h.checkRemovedMemberStops()
}

func (h *history) checkSessionsSurviveLeaderCrash() {
	c := h.c
	var sessions []*coord.Session
	for i, cl := range h.cls {
		ctx, cancel := context.WithTimeout(context.Background(), settleBound)
		s, err := cl.NewSession(ctx, coord.WithTTL(2*cl.MinSessionTTL()))
		cancel()
		if err != nil {
			h.fail("after the heal, client %d could not create a session: %v", i, err)
			continue
		}
		sessions = append(sessions, s)
	}
	leader := c.LeaderIndex()
	h.logf("crash the leader %s with %d fresh client sessions", c.Name(leader), len(sessions))
	c.Crash(leader)
	time.Sleep(100 * time.Millisecond)
	c.Restart(leader)
	c.Leader()
	if len(sessions) > 0 {
		// A session the new leader wrongly expires goes within a TTL
		// of its election; the client hears of it within a third of
		// one. Idle virtual seconds still cost ticks and heartbeats.
		time.Sleep(sessions[0].TTL() + 3*electionTimeout)
	}
	for _, s := range sessions {
		if err := s.Err(); err != nil {
			h.fail("session %d of a live client ended across a leader crash: %v", s.ID(), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), settleBound)
		_ = s.Close(ctx)
		cancel()
	}
}

func (h *history) checkRemovedMemberStops() {
	c := h.c
	leader := c.LeaderIndex()
	live := h.liveMembers()
	victim := live[(slices.Index(live, leader)+1)%len(live)]
	n := c.Node(victim)
	ctx, cancel := context.WithTimeout(context.Background(), settleBound)
	defer cancel()
	h.logf("remove %s", c.Name(victim))
	if err := c.Node(leader).Admin().RemoveMember(ctx, c.Name(victim)); err != nil {
		h.fail("remove %s: %v", c.Name(victim), err)
		return
	}
	select {
	case <-n.Done():
		if err := n.Err(); !errors.Is(err, coord.ErrRemoved) {
			h.fail("removed member %s stopped with %v, want ErrRemoved", c.Name(victim), err)
		}
	case <-time.After(settleBound):
		h.fail("removed member %s still running %v after its removal", c.Name(victim), settleBound)
	}
}

// describe says where member i stands, for a report.
func (h *history) describe(i int) string {
	if i < 0 {
		return "a client"
	}
	n := h.c.Node(i)
	if n == nil {
		return "not running"
	}
	st := n.Status()
	return fmt.Sprintf("%s: %v, leader %q, term %d, commit %d, applied %d, last %d", st.Name, st.Role, st.Leader,
		st.Term, st.Commit, st.Applied, st.LastIndex)
}
