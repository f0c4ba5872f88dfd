package clientwire

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// WatchSink is where a Handler's Watch pushes a watch's frames. Pushes
// never block: each watch may have Limits.WatchQueue frames and
// Limits.WatchQueueBytes bytes waiting to be written, and a push beyond
// either (or one that does not fit in the connection's queue) ends the
// watch as slow (the client gets a WatchEnd with CodeSlowWatcher and the
// revision to resume from). It is safe for concurrent use.
type WatchSink struct {
	s      *session
	id     uint64
	cancel context.CancelFunc

	mu       sync.Mutex
	queued   int   // frames pushed, not yet written
	bytes    int   // their bytes
	rev      int64 // the revision delivered up to, once all is written
	slow     bool
	tooLarge bool
	ending   bool // stopped by the client, or slow: pushes refused
	ended    bool // the Handler returned
	onStop   func()
}

// OnStop has fn run once when the watch is stopped (the client cancels
// it, it falls too far behind, or the connection ends), at once if it
// has been: for a Handler that keeps no goroutine waiting on the
// context. One fn a watch; it must not block.
func (w *WatchSink) OnStop(fn func()) {
	w.mu.Lock()
	if !w.ending {
		w.onStop = fn
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	fn()
}

// Events pushes changes of the watch, in revision order; rev is the
// revision of the last one. A batch longer than the client's frame limit
// is split.
func (w *WatchSink) Events(rev int64, events []Event) error {
	if err := w.take(); err != nil {
		return err
	}
	n, err := w.s.out.push(0, &WatchEvents{WatchID: w.id, Events: events, Rev: rev}, w.written)
	if errors.Is(err, ErrFrameTooLarge) {
		w.written(0)
		if len(events) < 2 {
			w.mu.Lock()
			w.tooLarge = true
			w.mu.Unlock()
			w.stop()
			return fmt.Errorf("%w: %v", ErrWatchEnded, err)
		}
		half := len(events) / 2
		if err := w.Events(events[half-1].KV.ModRev, events[:half]); err != nil {
			return err
		}
		return w.Events(rev, events[half:])
	}
	if err != nil {
		return w.failed(err)
	}
	w.pushed(n, rev)
	return nil
}

// Progress tells the client the watch has delivered every change up to
// rev.
func (w *WatchSink) Progress(rev int64) error {
	if err := w.take(); err != nil {
		return err
	}
	n, err := w.s.out.push(0, &WatchProgress{WatchID: w.id, Rev: rev}, w.written)
	if err != nil {
		return w.failed(err)
	}
	w.pushed(n, rev)
	return nil
}

// failed ends the watch whose push failed: as slow when its frame did
// not fit in the connection's queue.
func (w *WatchSink) failed(err error) error {
	if errors.Is(err, errQueueFull) {
		w.written(0) // never queued: its release will not run
		w.mu.Lock()
		w.slow = true
		w.mu.Unlock()
		w.stop()
	}
	return fmt.Errorf("%w: %v", ErrWatchEnded, err)
}

// take reserves a place in the watch's queue, or ends the watch as slow.
func (w *WatchSink) take() error {
	w.mu.Lock()
	if w.ending || w.ended {
		w.mu.Unlock()
		return ErrWatchEnded
	}
	if w.queued >= w.s.lim.WatchQueue || (w.queued > 0 && w.bytes >= w.s.watchLimit) {
		w.slow = true
		w.mu.Unlock()
		w.stop()
		return fmt.Errorf("%w: the client fell behind", ErrWatchEnded)
	}
	w.queued++
	w.mu.Unlock()
	return nil
}

// written gives back a frame's place and its n bytes.
func (w *WatchSink) written(n int) {
	w.mu.Lock()
	w.queued--
	w.bytes -= n
	w.mu.Unlock()
}

// pushed counts a queued frame's n bytes (after the push, so its
// release may come first) and the revision it delivers up to.
func (w *WatchSink) pushed(n int, rev int64) {
	w.mu.Lock()
	w.bytes += n
	w.rev = max(w.rev, rev)
	w.mu.Unlock()
}

// stop makes pushes fail and ends the Handler's context.
func (w *WatchSink) stop() {
	w.mu.Lock()
	w.ending = true
	fn := w.onStop
	w.onStop = nil
	w.mu.Unlock()
	w.cancel()
	if fn != nil {
		fn()
	}
}

// end is the WatchEnd for a Handler that returned err.
func (w *WatchSink) end(err error) *WatchEnd {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	e := &WatchEnd{WatchID: w.id, Rev: w.rev}
	var we *WatchEndError
	switch {
	case w.slow:
		e.Code, e.Message = CodeSlowWatcher, "the client fell behind the watch"
	case w.tooLarge:
		e.Code, e.Message = CodeFrameTooLarge, "an event is longer than the client's frame limit"
	case w.ending, err == nil:
		e.Code = CodeNone
	case errors.As(err, &we):
		e.Code, e.Message, e.CompactRev = we.Code, we.Message, we.CompactRev
	default:
		e.Code, e.Message = w.s.code(err), err.Error()
	}
	return e
}

// stopWatches stops every watch of the ended connection (their contexts
// ended with the session's; OnStop's hooks run now).
func (s *session) stopWatches() {
	s.mu.Lock()
	ws := make([]*WatchSink, 0, len(s.watches))
	for _, w := range s.watches {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
}

// startWatch answers WatchStart: OK then the watch's frames, or an error.
func (s *session) startWatch(id uint64, ws *WatchStart) error {
	if err := s.acquire(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.watches[ws.WatchID] != nil {
		s.mu.Unlock()
		s.reply(id, &ErrorMsg{Code: CodeInvalidArgument, Message: fmt.Sprintf("watch ID %d in use", ws.WatchID)})
		return nil
	}
	if len(s.watches) >= s.lim.MaxWatchers {
		s.mu.Unlock()
		s.reply(id, &ErrorMsg{Code: CodeTooManyWatchers,
			Message: fmt.Sprintf("%d watches open, the member's limit", s.lim.MaxWatchers)})
		return nil
	}
	ctx, cancel := context.WithCancel(s.ctx)
	w := &WatchSink{s: s, id: ws.WatchID, cancel: cancel, rev: max(ws.FromRev-1, 0)}
	s.watches[ws.WatchID] = w
	s.mu.Unlock()
	// OK is queued before the goroutine can push, so it precedes the
	// watch's frames.
	s.reply(id, &OK{})
	done := func(err error) {
		cancel()
		end := w.end(err)
		s.mu.Lock()
		delete(s.watches, ws.WatchID)
		s.mu.Unlock()
		_, _ = s.out.push(0, end, nil)
	}
	if st, ok := s.h.(WatchStarter); ok {
		// Counted as a task until done, as a goroutine of its own would be.
		s.tasks.Add(1)
		st.StartWatch(ctx, s.id, ws, w, func(err error) {
			done(err)
			s.tasks.Done()
		})
		return nil
	}
	s.tasks.Go(func() { done(s.h.Watch(ctx, s.id, ws, w)) })
	return nil
}
