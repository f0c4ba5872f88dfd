package coord

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/watch"
	"github.com/coordcell/coord/storage"
)

// EventType says what happened to a key.
type EventType int

// The event types.
const (
	// EventPut: the key was created or updated.
	EventPut EventType = iota + 1
	// EventDelete: the key was deleted (explicitly, or because its
	// session ended).
	EventDelete
	// EventProgress is not a change: it says the watch has delivered
	// every change up to Rev (see WithProgressNotify, RequestProgress).
	EventProgress
)

// String names the event type as logs and coordctl print it.
func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	case EventProgress:
		return "PROGRESS"
	}
	return "UNKNOWN"
}

// Event is one change to one key, or a progress report.
//
// The bytes of KV.Value and PrevKV.Value are shared by every watcher of
// the member that receives the same change, and by the member's own
// memory of recent changes: read them, copy them to keep a changed
// version, never modify them in place.
type Event struct {
	Type EventType
	// KV is the key after a put; after a delete, the key with its last
	// Version and CreateRev, no value, and ModRev = the delete's revision.
	KV KV
	// PrevKV is the key before the change (nil if a put created it). Set
	// only for watches WithPrevKV.
	PrevKV *KV
	// Rev is the cell revision of the change (for a progress report: the
	// revision the watch is current to).
	Rev int64
	// EndOfRev is true on the last event of its revision delivered to
	// this watch: the changes of one transaction or one session expiry
	// arrive together, and EndOfRev closes the batch.
	EndOfRev bool
}

// CompactedError ends a watch that needed revisions older than the
// retained history. It matches ErrCompacted with errors.Is; Oldest is the
// oldest revision still available. ListWatch recovers from it for you.
type CompactedError = watch.CompactedError

// SlowWatcherError ends a watch whose consumer fell too far behind (see
// WithMaxLag). It matches ErrSlowWatcher with errors.Is; resume with
// FromRev(LastRev) to miss and repeat nothing.
type SlowWatcherError = watch.SlowError

// WatchOption configures a watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	fromRev     int64
	fromSet     bool
	prevKV      bool
	puts, dels  bool // filters: which types to deliver (both = all)
	progress    time.Duration
	maxLag      int64
	maxLagSet   bool
	channelSize int
}

// FromRev starts the watch after revision rev: the watcher receives every
// change with a revision greater than rev. Pass the revision List
// returned to continue gap-free from a listing, or an event's Rev to
// resume after it. A rev older than the retained history ends the watch
// with a *CompactedError.
func FromRev(rev int64) WatchOption {
	return func(o *watchOptions) { o.fromRev, o.fromSet = rev, true }
}

// WithPrevKV adds to each event the key as it was before the change.
func WithPrevKV() WatchOption { return func(o *watchOptions) { o.prevKV = true } }

// PutsOnly delivers only puts (and progress reports).
func PutsOnly() WatchOption { return func(o *watchOptions) { o.puts, o.dels = true, false } }

// DeletesOnly delivers only deletes (and progress reports).
func DeletesOnly() WatchOption { return func(o *watchOptions) { o.puts, o.dels = false, true } }

// WithProgressNotify makes the watch report, whenever nothing was
// delivered for d, the revision it is current to (an EventProgress), so a
// watcher of a quiet prefix knows it is not stale.
func WithProgressNotify(d time.Duration) WatchOption {
	return func(o *watchOptions) { o.progress = d }
}

// WithMaxLag ends the watch with a *SlowWatcherError when its consumer
// stops reading and the watch falls more than revs revisions behind this
// member's head. Default: half of Config.HistoryRevisions, so a slow
// consumer hears of it while it can still resume. 0 disables the check.
func WithMaxLag(revs int64) WatchOption {
	return func(o *watchOptions) { o.maxLag, o.maxLagSet = revs, true }
}

// Watcher streams the changes under a prefix. It is served by the member
// it was started on, from that member's applied state. Its methods are
// safe for concurrent use.
type Watcher struct {
	events   chan Event
	cancel   context.CancelFunc
	progress chan struct{}
	lastRev  atomic.Int64
	// asked is set by RequestProgress, so the progress report a member
	// asks for itself to learn the watch is established (see watch) is
	// not withheld from a caller who asked for one too.
	asked atomic.Bool
	mu    sync.Mutex
	err   error
	// ready is made on first use (so any backend's Watcher has one) and
	// closed by markReady.
	ready     chan struct{}
	readyDone bool
	// src is the watch this one relays (see relayWatch), nil for a watch
	// a backend serves: its position, readiness and progress requests
	// are src's.
	src *Watcher
}

// Watch streams every change to keys under prefix, from this member's
// current revision (or from FromRev) until ctx ends or Close is called.
// Changes arrive in revision order, each exactly once, with no gaps. A
// member that lags the leader starts a little in the past, so nothing
// after the call is missed; for an exact start, List and pass its
// revision to FromRev.
//
// Watchers cost the member little: one lookup per changed key finds the
// watched prefixes it falls under, however many watchers share them, and
// a slow consumer never slows writes or other watchers.
func (n *Node) Watch(ctx context.Context, prefix string, opts ...WatchOption) *Watcher {
	return startWatch(ctx, n, prefix, opts)
}

// startWatch is Watch on any backend: the options are read and checked
// here, once.
func startWatch(ctx context.Context, b backend, prefix string, opts []WatchOption) *Watcher {
	o := watchOptions{puts: true, dels: true, channelSize: 64}
	for _, f := range opts {
		f(&o)
	}
	if bad := b.limits().checkWatch(prefix, &o); bad != nil {
		return failedWatcher(bad)
	}
	return b.watch(ctx, prefix, o)
}

// relayWatch returns a watch that delivers src's events, each rewritten
// by f (a namespace strips its prefix from the keys), and ends when src
// does, with its error. cancel ends src (its ctx is src's). The relay
// holds one event at most: src's buffer is the watch's buffer, so a
// consumer that falls behind holds back src as it would without the
// relay, and ends it past WithMaxLag.
func relayWatch(ctx context.Context, cancel context.CancelFunc, src *Watcher, f func(Event) Event) *Watcher {
	w := &Watcher{events: make(chan Event), cancel: cancel, src: src}
	go func() {
		defer cancel()
		for ev := range src.Events() {
			select {
			case w.events <- f(ev):
			case <-ctx.Done():
				// src ends with ctx: drain it so it can finish.
				for range src.Events() {
				}
			}
		}
		w.mu.Lock()
		w.err = src.Err()
		w.mu.Unlock()
		close(w.events)
	}()
	return w
}

// failedWatcher is a watch that ended before it started, with err.
func failedWatcher(err error) *Watcher {
	w := &Watcher{events: make(chan Event), cancel: func() {}, progress: make(chan struct{}, 1), err: err}
	close(w.events)
	w.markReady()
	return w
}

// watch serves a watch from this member's applied state.
func (n *Node) watch(ctx context.Context, prefix string, o watchOptions) *Watcher {
	if !o.fromSet {
		o.fromRev = n.sm.Revision()
	}
	if !o.maxLagSet {
		o.maxLag = n.cfg.HistoryRevisions / 2
	}
	ctx, cancel := context.WithCancel(ctx)
	// The watch also ends when the node closes.
	stop := context.AfterFunc(n.closing, cancel)
	w := &Watcher{events: make(chan Event, o.channelSize), cancel: cancel, progress: make(chan struct{}, 1)}
	w.lastRev.Store(o.fromRev)
	em := &emitter{w: w, o: &o, hub: n.hub}
	// The watch is established once the hub has read from the start
	// revision without finding it compacted: its first event, or, on a
	// quiet prefix, the progress report asked for here (which the
	// emitter keeps to itself unless the caller asked for one too).
	w.progress <- struct{}{}
	go func() {
		defer stop()
		defer w.markReady()
		err := n.hub.Watch(ctx, prefix, o.fromRev, o.progress, em, w.progress)
		if n.closing.Err() != nil && !errors.As(err, new(*SlowWatcherError)) {
			err = ErrClosed
		}
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		close(w.events)
	}()
	return w
}

// Events returns the channel of changes. It is buffered and lossless: a
// consumer that falls behind holds back only its own watch (and, past
// WithMaxLag, ends it). The watch's goroutine closes it when the watch
// ends; Err then says why.
func (w *Watcher) Events() <-chan Event { return w.events }

// Err returns why the watch ended: the context's error, ErrClosed, a
// *CompactedError or a *SlowWatcherError. nil while it runs.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// LastRev returns the revision of the last complete revision delivered
// (or the starting revision): FromRev(LastRev()) resumes the watch
// without a gap or a repeat.
func (w *Watcher) LastRev() int64 {
	if w.src != nil {
		return w.src.LastRev()
	}
	return w.lastRev.Load()
}

// Ready returns a channel that is closed once the watch is established:
// the member serving it has taken it on and found its start revision
// (LastRev until the first delivery) still in its history, so every
// change after that revision will be delivered, or the watch will end
// with a *SlowWatcherError or by ctx or Close, never with a
// *CompactedError. It is also closed if the watch ends before it was
// established; Err then says why. Wait on Ready before making a change
// the watch must see when the watch was started without FromRev.
func (w *Watcher) Ready() <-chan struct{} {
	if w.src != nil {
		return w.src.Ready()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ready == nil {
		w.ready = make(chan struct{})
	}
	return w.ready
}

// markReady closes Ready's channel, once; the backend serving the watch
// calls it when the watch is established, and when it ends.
func (w *Watcher) markReady() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ready == nil {
		w.ready = make(chan struct{})
	}
	if !w.readyDone {
		w.readyDone = true
		close(w.ready)
	}
}

// RequestProgress asks for an EventProgress as soon as the watch has
// delivered everything up to this member's current revision. It works
// on any watch, with or without WithProgressNotify: a consumer that
// wants to know it is current asks when it wants to, rather than being
// told on a timer.
func (w *Watcher) RequestProgress() {
	if w.src != nil {
		w.src.RequestProgress()
		return
	}
	w.asked.Store(true)
	select {
	case w.progress <- struct{}{}:
	default: // one is already asked for
	}
}

// Close ends the watch.
func (w *Watcher) Close() { w.cancel() }

// emitter turns the hub's events into the watcher's: filtered, with or
// without the previous state, a revision's events released together.
type emitter struct {
	w       *Watcher
	o       *watchOptions
	hub     *watch.Hub
	pending []Event
	lag     *time.Ticker
	ready   bool // Ready's channel is closed
	ownDone bool // the first progress report, watch's own request, is past
}

func (e *emitter) Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error {
	e.established()
	want := (ev.Type == storage.EventPut && e.o.puts) || (ev.Type == storage.EventDelete && e.o.dels)
	if want {
		e.pending = append(e.pending, toEvent(rev, ev, e.o.prevKV))
	}
	if !end {
		return nil
	}
	for i := range e.pending {
		e.pending[i].EndOfRev = i == len(e.pending)-1
		// Only between revisions may the watch end for being slow, so
		// LastRev always names a complete revision.
		if err := e.send(ctx, e.pending[i], i == 0); err != nil {
			return err
		}
	}
	e.pending = e.pending[:0]
	e.w.lastRev.Store(rev)
	return nil
}

func (e *emitter) Progress(ctx context.Context, rev int64) error {
	e.w.lastRev.Store(rev)
	e.established()
	asked := e.w.asked.Swap(false)
	if !e.ownDone {
		// The first report answers the request watch made itself (or
		// one that came at the same time): withhold it unless the
		// caller asked too. With WithProgressNotify a timer's report
		// that came first is withheld instead, and the request's
		// follows at once.
		e.ownDone = true
		if !asked {
			return nil
		}
	}
	return e.send(ctx, Event{Type: EventProgress, Rev: rev, EndOfRev: true}, false)
}

// established notes that the hub has served the watch from its start
// revision: the first event, or the first progress report.
func (e *emitter) established() {
	if !e.ready {
		e.ready = true
		e.w.markReady()
	}
}

func (e *emitter) send(ctx context.Context, ev Event, mayEnd bool) error {
	select {
	case e.w.events <- ev:
		return nil
	default:
	}
	var lag <-chan time.Time
	if mayEnd && e.o.maxLag > 0 {
		if e.lag == nil {
			e.lag = time.NewTicker(100 * time.Millisecond)
		}
		e.lag.Reset(100 * time.Millisecond)
		defer e.lag.Stop()
		lag = e.lag.C
	}
	for {
		select {
		case e.w.events <- ev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-lag:
			if behind := e.hub.Head() - e.w.lastRev.Load(); behind > e.o.maxLag {
				return &SlowWatcherError{LastRev: e.w.lastRev.Load(), Lag: behind}
			}
		}
	}
}

func toEvent(rev int64, ev *storage.Event, withPrev bool) Event {
	t := EventPut
	if ev.Type == storage.EventDelete {
		t = EventDelete
	}
	out := Event{Type: t, KV: fromCmdKV(ev.KV), Rev: rev}
	if withPrev && ev.Prev != nil {
		p := fromCmdKV(*ev.Prev)
		out.PrevKV = &p
	}
	return out
}

// ListWatch keeps the caller's view of a prefix consistent with the cell
// without a hand-written resync loop: it lists prefix (linearizably) and
// calls onList with the keys and the listing's revision, then watches from
// that revision and calls onEvent with each change. When the watch cannot
// go on (its history was compacted, or the consumer fell behind) it lists
// again and calls onList again: treat each onList as a fresh start.
// Callbacks run on the caller's goroutine, one at a time. ListWatch
// returns when ctx ends, when a callback returns an error, or when the
// member closes.
func (n *Node) ListWatch(ctx context.Context, prefix string, onList func(kvs []KV, rev int64) error,
	onEvent func(Event) error, opts ...WatchOption) error {
	return listWatch(ctx, n, prefix, onList, onEvent, opts...)
}

// listAgain says whether ListWatch lists again after err: not once the
// way into the cell is closed, nor when the cell refused the prefix
// (a client learns the member's key limit from the refusal) or found it
// larger than one read may be (Config.MaxReadBytes), which no retry
// changes.
func listAgain(err error) bool {
	return notClosed(err) && !errors.Is(err, ErrKeyTooLarge) && !errors.Is(err, ErrInvalidKey) &&
		!errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrReadTooLarge)
}

// listWatch is ListWatch on any backend.
func listWatch(ctx context.Context, b backend, prefix string, onList func(kvs []KV, rev int64) error,
	onEvent func(Event) error, opts ...WatchOption) error {
	for {
		var (
			kvs []KV
			rev int64
		)
		// No quorum for now: try again until there is one.
		err := retry(ctx, b, nil, listAgain, func() (err error) {
			kvs, rev, err = listPrefix(ctx, b, prefix, nil)
			return err
		})
		if err != nil {
			return err
		}
		if err := onList(kvs, rev); err != nil {
			return err
		}
		w := startWatch(ctx, b, prefix, append(opts, FromRev(rev)))
		for ev := range w.Events() {
			if err := onEvent(ev); err != nil {
				w.Close()
				for range w.Events() {
				}
				return err
			}
		}
		err = w.Err()
		if !errors.Is(err, ErrCompacted) && !errors.Is(err, ErrSlowWatcher) {
			return err
		}
	}
}
