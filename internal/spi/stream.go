package spi

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
)

// Stream is a watch's consumer end over a channel of E: the root's
// Watcher is a Stream of its own Event (conv converts), ListWatch's and
// the client cache's a Stream of Event. It implements Sink, and what a
// consumer needs (Events, Err, Ready, RequestProgress, Close). Its
// methods are safe for concurrent use.
type Stream[E any] struct {
	events   chan E
	conv     func(Event) E
	cancel   context.CancelFunc
	progress chan struct{}
	lastRev  atomic.Int64
	// asked is set by RequestProgress, so the progress report a backend
	// asks for itself (to learn the watch is established) is not
	// withheld from a caller who asked for one too.
	asked atomic.Bool
	// onProgress, once set, is called for each request taken from
	// progress: a backend that keeps no goroutine waiting on the channel
	// learns of a request this way.
	onProgress atomic.Pointer[func()]

	mu        sync.Mutex
	err       error
	ended     bool
	ready     chan struct{}
	readyDone bool
}

var _ Sink = (*Stream[Event])(nil)

// NewStream returns a stream whose channel buffers size items; cancel
// ends the watch feeding it (Close calls it), conv turns a backend's
// events into E.
func NewStream[E any](size int, cancel context.CancelFunc, conv func(Event) E) *Stream[E] {
	return &Stream[E]{events: make(chan E, size), conv: conv, cancel: cancel,
		progress: make(chan struct{}, 1), ready: make(chan struct{})}
}

// Events is the channel of changes, closed when the watch ends.
func (s *Stream[E]) Events() <-chan E { return s.events }

// Err is why the watch ended; nil while it runs.
func (s *Stream[E]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// LastRev is the last complete revision delivered, or the start.
func (s *Stream[E]) LastRev() int64 { return s.lastRev.Load() }

// SetLastRev moves LastRev.
func (s *Stream[E]) SetLastRev(rev int64) { s.lastRev.Store(rev) }

// Ready is closed once the watch is established, or has ended.
func (s *Stream[E]) Ready() <-chan struct{} { return s.ready }

// MarkReady closes Ready's channel, once.
func (s *Stream[E]) MarkReady() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.readyDone {
		s.readyDone = true
		close(s.ready)
	}
}

// RequestProgress asks the backend for a progress report.
func (s *Stream[E]) RequestProgress() {
	s.asked.Store(true)
	select {
	case s.progress <- struct{}{}:
	default: // one is already asked for
	}
	if fn := s.onProgress.Load(); fn != nil {
		s.takeProgress(*fn)
	}
}

// OnProgressRequest has fn called for every progress request from now
// on, those already waiting included, in place of the channel.
func (s *Stream[E]) OnProgressRequest(fn func()) {
	s.onProgress.Store(&fn)
	s.takeProgress(fn)
}

// takeProgress calls fn if a request waits on the channel. Both
// RequestProgress and OnProgressRequest try, after the one puts and the
// other sets the hook, so a request that raced the hook's setting is
// taken by one of them, once.
func (s *Stream[E]) takeProgress(fn func()) {
	select {
	case <-s.progress:
		fn()
	default:
	}
}

// ProgressRequests carries the progress requests to the backend.
func (s *Stream[E]) ProgressRequests() chan struct{} { return s.progress }

// TakeAsked reports and clears whether the consumer asked for progress.
func (s *Stream[E]) TakeAsked() bool { return s.asked.Swap(false) }

// Close ends the watch.
func (s *Stream[E]) Close() { s.cancel() }

// Send delivers ev, converted (see Sink.Send).
func (s *Stream[E]) Send(ctx context.Context, ev Event, poll <-chan time.Time, stop <-chan struct{}) (bool, error) {
	return s.Put(ctx, s.conv(ev), poll, stop)
}

// TrySend delivers ev, converted, if the channel has room now.
func (s *Stream[E]) TrySend(ev Event) bool {
	select {
	case s.events <- s.conv(ev):
		return true
	default:
		return false
	}
}

// Put delivers an item as it is, as Send does an event.
func (s *Stream[E]) Put(ctx context.Context, e E, poll <-chan time.Time, stop <-chan struct{}) (bool, error) {
	select {
	case s.events <- e:
		return true, nil
	default:
	}
	select {
	case s.events <- e:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-poll:
		return false, nil
	case <-stop:
		return false, nil
	}
}

// End records err, marks the stream ready and closes its channel, once.
func (s *Stream[E]) End(err error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.err = err
	s.mu.Unlock()
	s.MarkReady()
	close(s.events)
}

// Failed is a stream that ended before it started, with err.
func Failed[E any](err error, conv func(Event) E) *Stream[E] {
	s := NewStream(0, func() {}, conv)
	s.End(err)
	return s
}

// StartWatch checks a watch of prefix with o against b's limits and
// starts it on b, feeding a Stream of E.
func StartWatch[E any](ctx context.Context, b Backend, prefix string, o WatchOptions, conv func(Event) E) *Stream[E] {
	if err := b.Limits().CheckWatch(prefix, &o); err != nil {
		return Failed(err, conv)
	}
	prefix = ResolveWatch(prefix, &o)
	ctx, cancel := context.WithCancel(ctx)
	s := NewStream(b.WatchBuffer(), cancel, conv)
	b.Watch(ctx, prefix, o, s)
	return s
}

// DefaultWatch is the options of a watch given none.
func DefaultWatch() WatchOptions { return WatchOptions{Puts: true, Dels: true} }

// ListAgain says whether ListWatch lists again after err: not once the
// way into the cell is closed, nor when the cell refused the prefix (a
// client learns the member's key limit from the refusal) or found it
// larger than one read may be (Config.MaxReadBytes), which no retry
// changes.
func ListAgain(err error) bool {
	return NotClosed(err) && !errors.Is(err, errs.KeyTooLarge) && !errors.Is(err, errs.InvalidKey) &&
		!errors.Is(err, errs.InvalidArgument) && !errors.Is(err, errs.ReadTooLarge)
}

// ListWatch is the root's ListWatch over b, in b's own vocabulary: it
// lists prefix (linearizably, validated against b's limits) and calls
// onList, then watches from the listing's revision with o and calls
// onEvent with each change, listing again when the watch cannot go on
// (compacted history, a consumer too far behind). It returns when ctx
// ends, a callback fails, or b closes.
func ListWatch(ctx context.Context, b Backend, prefix string, onList func(kvs []command.KV, rev int64) error,
	onEvent func(Event) error, o WatchOptions) error {
	for {
		var (
			kvs []command.KV
			rev int64
		)
		// No quorum for now: try again until there is one.
		// An exact or ranged watch lists what it watches.
		ro := ReadOptions{}
		if mo := o; mo.Exact || mo.Range {
			ResolveWatch(prefix, &mo)
			ro.End = mo.MatchEnd
		}
		err := Retry(ctx, b, nil, ListAgain, func() (err error) {
			if err := b.Limits().CheckList(prefix, ro); err != nil {
				return err
			}
			kvs, rev, err = b.List(ctx, prefix, ro)
			return err
		})
		if err != nil {
			return err
		}
		if err := onList(kvs, rev); err != nil {
			return err
		}
		wo := o
		wo.FromRev, wo.FromSet = rev, true
		w := StartWatch(ctx, b, prefix, wo, func(ev Event) Event { return ev })
		for ev := range w.Events() {
			if err := onEvent(ev); err != nil {
				w.Close()
				for range w.Events() {
				}
				return err
			}
		}
		err = w.Err()
		if !errors.Is(err, errs.Compacted) && !errors.Is(err, errs.SlowWatcher) {
			return err
		}
	}
}
