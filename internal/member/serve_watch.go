package member

import (
	"context"
	"errors"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/watch"
	"github.com/coordcell/coord/storage"
)

// Watch serves a client's watch from this member's hub, straight into
// the connection's sink: a revision's events go as one frame, and a
// client that falls behind is ended as slow by the sink (never buffered
// here without bound; the client resumes from the revision its WatchEnd
// names). w.FromRev is the first revision wanted (0 = after the current
// one), so Watch(FromRev(r)) on a client sends r+1. It returns when the
// watch has ended (StartWatch is what the connection uses).
func (h *clientHandler) Watch(ctx context.Context, id string, w *clientwire.WatchStart, sink *clientwire.WatchSink) error {
	done := make(chan error, 1)
	h.StartWatch(ctx, id, w, sink, func(err error) { done <- err })
	return <-done
}

// StartWatch starts Watch's watch and returns at once; done is told why
// it ended. While the watch waits for events no goroutine waits with it
// (watch.Hub.Start).
func (h *clientHandler) StartWatch(ctx context.Context, _ string, w *clientwire.WatchStart, sink *clientwire.WatchSink, done func(error)) {
	n := h.n
	if err := n.inputLimits().CheckPrefix(w.Prefix); err != nil {
		done(err)
		return
	}
	if n.closing.Err() != nil {
		done(n.closedErr())
		return
	}
	from := n.sm.Revision()
	if w.FromRev > 0 {
		from = w.FromRev - 1
	}
	// The watch ends when its sink stops (the client cancels it, goes
	// away, or is too slow: OnStop below) or when the member closes (the
	// hub ends every watch): no hook on a context, which cost each of
	// thousands of watches a few hundred bytes.
	em := &sinkEmitter{sink: sink, puts: !w.DeletesOnly, dels: !w.PutsOnly, prevKV: w.PrevKV, told: from}
	every := progressEvery(w.ProgressInterval, n.electionTimeout())
	var pos *watch.Position
	if rep := sink.Reporter(); rep != nil && every > 0 {
		// The connection's reports say when it is current (one frame
		// for all its watches, serve_watch_reports.go), so the watch
		// sends none of its own.
		pos = watch.NewPosition()
		h.reports.add(h.conn, rep, sink.ID(), pos, n.hub, n.electionTimeout())
		every = 0
	}
	// Without a reporter (a client of version 6 or below) a report per
	// watch, which the emitter sends only at a revision newer than it
	// told.
	sub := n.hub.Start(context.WithoutCancel(ctx), w.Prefix, from, every, em, pos, func(err error) {
		if pos != nil {
			h.reports.remove(sink.ID())
		}
		var ce *watch.CompactedError
		switch {
		case errors.As(err, &ce):
			err = &clientwire.WatchEndError{Code: clientwire.CodeCompacted, Message: err.Error(), CompactRev: ce.Oldest}
		case n.closing.Err() != nil:
			err = n.closedErr()
		}
		done(err)
	})
	sink.OnStop(sub.Stop)
}

// progressEvery is the interval of a client watch's progress reports:
// what the client asked for, in whole election timeouts (at least one, at
// most a day; 0 = none). A client names it, so it is bounded here: a
// nanosecond would have the member spin.
func progressEvery(asked, et time.Duration) time.Duration {
	if asked <= 0 || et <= 0 {
		return 0
	}
	asked = min(asked, 24*time.Hour)
	n := (asked + et - 1) / et
	return max(n, 1) * et
}

// sinkEmitter turns the hub's events into the wire's, a revision's
// events in one push.
type sinkEmitter struct {
	sink       *clientwire.WatchSink
	puts, dels bool
	prevKV     bool
	pending    []clientwire.Event
	// told is the revision the client knows the watch is current to:
	// the start, its last events' or its last progress report's.
	told int64
}

func (e *sinkEmitter) Event(_ context.Context, rev int64, ev *storage.Event, end bool) error {
	put := ev.Type == storage.EventPut
	if (put && e.puts) || (!put && e.dels) {
		out := clientwire.Event{Type: clientwire.EventDelete, KV: ev.KV}
		if put {
			out.Type = clientwire.EventPut
		}
		if e.prevKV && ev.Prev != nil {
			p := *ev.Prev
			out.PrevKV = &p
		}
		e.pending = append(e.pending, out)
	}
	if !end {
		return nil
	}
	if len(e.pending) == 0 {
		return nil
	}
	e.pending[len(e.pending)-1].EndOfRev = true
	// The sink copies nothing: each push gets its own slice.
	evs := e.pending
	e.pending = nil
	if err := e.sink.Events(rev, evs); err != nil {
		return err
	}
	e.told = rev
	return nil
}

// Progress reports rev only when it tells the client something: a
// report at the revision it already has is dropped. A client asks for
// a report every election timeout on a quiet prefix (so that it resumes
// near the head after a move); in a cell at rest, sending each of its
// idle watches one a second anyway cost the members a third of a core
// each, and the client as much again, at 100,000 watches.
func (e *sinkEmitter) Progress(_ context.Context, rev int64) error {
	if rev <= e.told {
		return nil
	}
	if err := e.sink.Progress(rev); err != nil {
		return err
	}
	e.told = rev
	return nil
}
