package watch

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage"
)

// A watch (a Sub) has a goroutine only while it has something to do:
// it reads what its group's window (or the history) holds after the
// last revision it delivered, hands it to its emitter, and once caught
// up it parks on its group and the goroutine ends. What gives it work
// again (a publish into its group, a reset, its progress interval, a
// progress request, its context's end) takes it off the parked list
// under the hub's lock and starts a goroutine for it. A member holding
// hundreds of thousands of quiet watches pays a few hundred bytes for
// each, not a goroutine's stack.

// Emitter receives what a watch produces, in order, on one goroutine at
// a time (not always the same one); an error from it ends the watch with
// that error. end marks the last event of its revision under the watched
// prefix. ev is shared with other watchers: read it, never change it.
type Emitter interface {
	Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error
	Progress(ctx context.Context, rev int64) error
}

// Sub is one watch of a hub, started by Start.
type Sub struct {
	h      *Hub
	g      *group
	prefix string
	every  time.Duration
	e      Emitter
	pos    *Position
	ctx    context.Context
	done   func(error)

	// The running goroutine's; a parked watch has none, and the hub's
	// lock passes them from one goroutine to the next.
	from    int64
	buf     []item // the window hands out copies
	stopCtx func() bool

	// Under the hub's lock.
	timer    *time.Timer // the progress interval's; nil without one
	parked   bool        // on g.parked, at index at
	at       int
	want     bool // a progress report is asked for
	stopped  bool // Stop was called
	finished bool
}

// Start starts a watch and returns at once. It delivers the events
// under prefix with revision > from, in revision order, until ctx ends
// or the emitter or the history fails; done is then called once, with
// the reason, after which the emitter is called no more.
//
// every, when positive, reports progress (the revision the watch is
// current to) whenever nothing was delivered for that long;
// RequestProgress asks for a report as soon as the watch is current.
// pos, when not nil, says where the watch waits while it waits for
// events, for Current to report it current to the head for its caller
// (a member tells a connection's current watches in one frame): made by
// NewPosition, one a watch.
func (h *Hub) Start(ctx context.Context, prefix string, from int64, every time.Duration, e Emitter, pos *Position, done func(error)) *Sub {
	h.stats.watchers.Add(1)
	g := h.join(prefix)
	s := &Sub{h: h, g: g, prefix: prefix, every: every, e: e, pos: pos, ctx: ctx, done: done, from: from}
	if pos != nil {
		pos.g.Store(g)
	}
	if every > 0 {
		h.mu.Lock() // the timer's function may run before Start returns
		s.timer = time.AfterFunc(every, s.progressDue)
		h.mu.Unlock()
	}
	s.stopCtx = func() bool { return false }
	if ctx.Done() != nil {
		s.stopCtx = context.AfterFunc(ctx, func() { s.wake(false) })
	}
	go s.run()
	return s
}

// Stop ends the watch as its context's end would (context.Canceled): for
// a caller that starts it with a context that never ends, to save each
// watch the context's hook.
func (s *Sub) Stop() {
	s.h.mu.Lock()
	s.stopped = true
	s.h.mu.Unlock()
	s.wake(false)
}

// Close ends every watch of the hub with errs.Closed (each as soon as
// its emitter returns, if it is delivering), and any started after it at
// once: the member closing, which ends its watches this one way rather
// than with a context a watch.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	var run []*Sub
	for _, g := range h.groups {
		run = g.changedLocked(run)
	}
	h.mu.Unlock()
	spawn(run)
}

// RequestProgress asks for a progress report as soon as the watch is
// current.
func (s *Sub) RequestProgress() { s.wake(true) }

// progressDue runs when the progress interval passed with nothing
// delivered.
func (s *Sub) progressDue() {
	s.h.mu.Lock()
	if !s.finished {
		s.timer.Reset(s.every)
	}
	s.h.mu.Unlock()
	s.wake(true)
}

// wake sets the watch going if it is parked, asking for a progress
// report if progress.
func (s *Sub) wake(progress bool) {
	h := s.h
	h.mu.Lock()
	if s.finished {
		h.mu.Unlock()
		return
	}
	s.want = s.want || progress
	run := s.parked
	if run {
		g := s.g
		last := len(g.parked) - 1
		g.parked[s.at] = g.parked[last]
		g.parked[s.at].at = s.at
		g.parked[last] = nil
		g.parked = g.parked[:last]
		s.unparkLocked()
	}
	h.mu.Unlock()
	if run {
		go s.run()
	}
}

// unparkLocked marks s running. Under h.mu, with s taken off its
// group's parked list.
func (s *Sub) unparkLocked() {
	s.parked = false
	if s.pos != nil {
		s.pos.parked.Store(-1)
	}
}

// spawn sets going the watches a change took off their parked lists.
func spawn(run []*Sub) {
	for _, s := range run {
		go s.run()
	}
}

// run delivers what the watch has to deliver, and parks it when it is
// caught up.
func (s *Sub) run() {
	h := s.h
	for {
		if err := s.ctx.Err(); err != nil {
			s.finish(err)
			return
		}
		items, gen, current, err := s.read(s.buf[:0])
		if err != nil {
			s.finish(err)
			return
		}
		for i, it := range items {
			if err := s.e.Event(s.ctx, it.rev, it.ev, it.end); err != nil {
				h.stats.events.Add(uint64(i))
				s.finish(err)
				return
			}
			s.from = it.rev
			if s.timer != nil {
				s.timer.Reset(s.every)
			}
		}
		// Once per batch rather than per event: one atomic add.
		h.stats.events.Add(uint64(len(items)))
		// Pin no event while waiting, and keep no large batch parked.
		clear(items)
		s.buf = items[:0]
		if len(items) > 0 {
			continue
		}
		if cap(s.buf) > 16 {
			s.buf = nil
		}
		// Caught up: every event under prefix up to current was delivered.
		s.from = max(s.from, current)
		parked, report := s.park(gen)
		if parked {
			return
		}
		if report {
			if err := s.e.Progress(s.ctx, s.from); err != nil {
				s.finish(err)
				return
			}
		}
	}
}

// park puts the watch on its group's parked list, unless what it read at
// gen has changed since or something is asked of it: it reports whether
// it did (its goroutine then ends), and whether a progress report is
// due (taken: the caller sends it).
func (s *Sub) park(gen uint64) (parked, report bool) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.want {
		s.want = false
		return false, true
	}
	if s.g.gen != gen || s.ctx.Err() != nil || h.closed || s.stopped {
		return false, false
	}
	s.parked, s.at = true, len(s.g.parked)
	s.g.parked = append(s.g.parked, s)
	if s.pos != nil {
		// Every event up to from is with the emitter: from here Current
		// may report the watch current.
		s.pos.parked.Store(s.from)
	}
	return true, false
}

// finish ends the watch with err.
func (s *Sub) finish(err error) {
	h := s.h
	s.stopCtx()
	h.mu.Lock()
	s.finished = true
	if s.timer != nil {
		s.timer.Stop()
	}
	h.mu.Unlock()
	h.leave(s.g)
	if s.pos != nil {
		s.pos.parked.Store(-1)
	}
	h.stats.watchers.Add(-1)
	switch {
	case errors.Is(err, errs.SlowWatcher):
		h.stats.slowEnds.Add(1)
	case errors.Is(err, errs.Compacted):
		h.stats.compactedEnds.Add(1)
	}
	s.done(err)
}

// The most events a watch copies out of a window at once (more only to
// end on a whole revision): enough to make the lock's cost per event
// small, and a bound on what a stuck watcher holds.
const readBatch = 256

// read appends to dst the events under the watch's prefix after from,
// up to whole revisions: copies from the group's window when it covers
// from, else from the history; an error ends the watch (the hub closed,
// Stop called, the history compacted or failing). With nothing to
// deliver it returns the revision the watch is current to. gen is the
// group's window as read: the watch may park only while it has not
// changed.
func (s *Sub) read(dst []item) (_ []item, gen uint64, current int64, _ error) {
	h, g, prefix, from := s.h, s.g, s.prefix, s.from
	h.mu.RLock()
	switch {
	case h.closed:
		h.mu.RUnlock()
		return nil, 0, 0, errs.Closed
	case s.stopped:
		h.mu.RUnlock()
		return nil, 0, 0, context.Canceled
	}
	gen, head := g.gen, h.head
	if from >= g.win.start {
		// Copied under the lock: the window's ring is Publish's to move
		// and overwrite as soon as the lock is released.
		dst = g.win.copyAfter(from, dst, readBatch)
		h.mu.RUnlock()
		return dst, gen, head, nil
	}
	h.mu.RUnlock()
	const batch = 256
	for {
		revs, err := h.hist.History(from, batch)
		if errors.Is(err, storage.ErrCompacted) {
			return nil, gen, 0, &CompactedError{Oldest: h.hist.OldestRevision()}
		}
		if err != nil {
			return nil, gen, 0, err
		}
		if len(revs) == 0 {
			// The history has nothing after from yet (the window lags the
			// history only while a publish is on its way).
			return dst, gen, from, nil
		}
		for ri := range revs {
			r := &revs[ri]
			n := len(dst)
			for ei := range r.Events {
				if strings.HasPrefix(r.Events[ei].KV.Key, prefix) {
					dst = append(dst, item{rev: r.Rev, ev: &r.Events[ei]})
				}
			}
			if len(dst) > n {
				dst[len(dst)-1].end = true
			}
			from = r.Rev
		}
		if len(dst) > 0 {
			return dst, gen, from, nil
		}
		if from >= head {
			return dst, gen, from, nil
		}
	}
}
