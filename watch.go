package coord

import (
	"context"
	"errors"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
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
// retained history, and fails a read WithRev of such a revision. It
// matches ErrCompacted with errors.Is. ListWatch recovers from it for
// you.
type CompactedError struct {
	// Oldest is the oldest revision still available: a watch may resume
	// from Oldest-1 or later.
	Oldest int64
}

// Error says which revision is the oldest still available.
func (e *CompactedError) Error() string { return (&spi.CompactedError{Oldest: e.Oldest}).Error() }

// Is makes errors.Is(err, ErrCompacted) hold.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// SlowWatcherError ends a watch whose consumer fell too far behind (see
// WithMaxLag). It matches ErrSlowWatcher with errors.Is; resume with
// FromRev(LastRev) to miss and repeat nothing.
type SlowWatcherError struct {
	// LastRev is the revision of the last event delivered: resume with a
	// watch from it.
	LastRev int64
	// Lag is how many revisions behind the member's head it was.
	Lag int64
}

// Error says how far behind the watch was and where to resume.
func (e *SlowWatcherError) Error() string {
	return (&spi.SlowError{LastRev: e.LastRev, Lag: e.Lag}).Error()
}

// Is makes errors.Is(err, ErrSlowWatcher) hold.
func (e *SlowWatcherError) Is(target error) bool { return target == ErrSlowWatcher }

// watchErr is a backend's watch error in the package's own types: the
// one place a user's *CompactedError and *SlowWatcherError are made.
func watchErr(err error) error {
	var ce *spi.CompactedError
	if errors.As(err, &ce) {
		return &CompactedError{Oldest: ce.Oldest}
	}
	var se *spi.SlowError
	if errors.As(err, &se) {
		return &SlowWatcherError{LastRev: se.LastRev, Lag: se.Lag}
	}
	return err
}

// WatchOption configures a watch.
type WatchOption func(*watchOptions)

// watchOptions are spi's: the backends read them as they are.
type watchOptions = spi.WatchOptions

// FromRev starts the watch after revision rev: the watcher receives every
// change with a revision greater than rev. Pass the revision List
// returned to continue gap-free from a listing, or an event's Rev to
// resume after it. A rev older than the retained history ends the watch
// with a *CompactedError.
func FromRev(rev int64) WatchOption {
	return func(o *watchOptions) { o.FromRev, o.FromSet = rev, true }
}

// WithPrevKV adds to each event the key as it was before the change.
func WithPrevKV() WatchOption { return func(o *watchOptions) { o.PrevKV = true } }

// PutsOnly delivers only puts (and progress reports).
func PutsOnly() WatchOption { return func(o *watchOptions) { o.Puts, o.Dels = true, false } }

// DeletesOnly delivers only deletes (and progress reports).
func DeletesOnly() WatchOption { return func(o *watchOptions) { o.Puts, o.Dels = false, true } }

// ExactKey makes Watch's key one key, not a prefix: Watch(ctx,
// "config/sched", ExactKey()) delivers the changes of "config/sched" and
// not of "config/sched2". The key must not be empty (ErrInvalidKey).
// ListWatch with it lists that key alone.
func ExactKey() WatchOption { return func(o *watchOptions) { o.Exact = true } }

// WatchRange makes Watch deliver the changes of the keys in [key, end)
// instead of those under a prefix, as List's Range reads them: end
// "\x00" is every key from key on, and an end at or before key matches
// nothing. The watch is served as one of the longest prefix its keys
// share, filtered: it costs the member (and, through a Client, the
// connection) the changes under that prefix. ListWatch with it lists
// the range. With ExactKey, ErrInvalidArgument.
func WatchRange(end string) WatchOption {
	return func(o *watchOptions) { o.Range, o.End = true, end }
}

// WithProgressNotify makes the watch report, whenever nothing was
// delivered for d, the revision it is current to (an EventProgress), so a
// watcher of a quiet prefix knows it is not stale.
func WithProgressNotify(d time.Duration) WatchOption {
	return func(o *watchOptions) { o.Progress = d }
}

// WithMaxLag ends the watch with a *SlowWatcherError when its consumer
// stops reading and the watch falls more than revs revisions behind this
// member's head. Default: half of Config.HistoryRevisions, so a slow
// consumer hears of it while it can still resume. 0 disables the check.
func WithMaxLag(revs int64) WatchOption {
	return func(o *watchOptions) { o.MaxLag, o.MaxLagSet = revs, true }
}

func watchOpts(opts []WatchOption) watchOptions {
	o := spi.DefaultWatch()
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Watcher streams the changes under a prefix. It is served by the member
// it was started on, from that member's applied state. Its methods are
// safe for concurrent use.
type Watcher struct {
	s *spi.Stream[Event]
	// src is the watch this one relays (see relayWatch), nil for a watch
	// a backend serves: its position, readiness and progress requests
	// are src's.
	src *Watcher
}

// Watch streams every change to keys under prefix (the key alone with
// ExactKey, a range with WatchRange), from this member's
// current revision (or from FromRev) until ctx ends or Close is called.
// Changes arrive in revision order, each exactly once, with no gaps. A
// member that lags the leader starts a little in the past, so nothing
// after the call is missed; for an exact start, List and pass its
// revision to FromRev.
//
// Watchers cost the member little: one lookup per changed key finds the
// watched prefixes it falls under, however many watchers share them, and
// a slow consumer never slows writes or other watchers. Through a
// Client, watches of one prefix (or of prefixes under it) share one
// upstream watch, and a watch carries on, gap-free, when the client
// moves to another member.
func (c *cellOps) Watch(ctx context.Context, prefix string, opts ...WatchOption) *Watcher {
	return startWatch(ctx, c, prefix, opts)
}

// startWatch is Watch on any backend: the options are read and checked
// here, once.
func startWatch(ctx context.Context, b *cellOps, prefix string, opts []WatchOption) *Watcher {
	return &Watcher{s: spi.StartWatch(ctx, b.b, prefix, watchOpts(opts), toEvent)}
}

// relayWatch returns a watch that delivers src's events, each rewritten
// by f (a namespace strips its prefix from the keys), and ends when src
// does, with its error. cancel ends src (its ctx is src's). The relay
// holds one event at most: src's buffer is the watch's buffer, so a
// consumer that falls behind holds back src as it would without the
// relay, and ends it past WithMaxLag.
func relayWatch(ctx context.Context, cancel context.CancelFunc, src *Watcher, f func(Event) Event) *Watcher {
	w := &Watcher{s: spi.NewStream(0, cancel, toEvent), src: src}
	go func() {
		defer cancel()
		for ev := range src.Events() {
			if _, err := w.s.Put(ctx, f(ev), nil, nil); err != nil {
				// src ends with ctx: drain it so it can finish.
				for range src.Events() {
				}
			}
		}
		w.s.End(src.Err())
	}()
	return w
}

// failedWatcher is a watch that ended before it started, with err.
func failedWatcher(err error) *Watcher { return &Watcher{s: spi.Failed(err, toEvent)} }

// Events returns the channel of changes. It is buffered and lossless: a
// consumer that falls behind holds back only its own watch (and, past
// WithMaxLag, ends it). The watch's goroutine closes it when the watch
// ends; Err then says why.
func (w *Watcher) Events() <-chan Event { return w.s.Events() }

// Err returns why the watch ended: the context's error, ErrClosed, a
// *CompactedError or a *SlowWatcherError. nil while it runs.
func (w *Watcher) Err() error { return watchErr(w.s.Err()) }

// LastRev returns the revision of the last complete revision delivered
// (or the starting revision): FromRev(LastRev()) resumes the watch
// without a gap or a repeat.
func (w *Watcher) LastRev() int64 {
	if w.src != nil {
		return w.src.LastRev()
	}
	return w.s.LastRev()
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
	return w.s.Ready()
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
	w.s.RequestProgress()
}

// Close ends the watch.
func (w *Watcher) Close() { w.s.Close() }

// toEvent is a backend's event in the root's types.
func toEvent(ev spi.Event) Event {
	out := Event{Type: EventType(ev.Type), KV: fromCmdKV(ev.KV), Rev: ev.Rev, EndOfRev: ev.EndOfRev}
	if ev.PrevKV != nil {
		p := fromCmdKV(*ev.PrevKV)
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
func (c *cellOps) ListWatch(ctx context.Context, prefix string, onList func(kvs []KV, rev int64) error,
	onEvent func(Event) error, opts ...WatchOption) error {
	return listWatch(ctx, c, prefix, onList, onEvent, opts...)
}

// listWatch is ListWatch on any backend.
func listWatch(ctx context.Context, b *cellOps, prefix string, onList func(kvs []KV, rev int64) error,
	onEvent func(Event) error, opts ...WatchOption) error {
	return watchErr(spi.ListWatch(ctx, b.b, prefix,
		func(kvs []command.KV, rev int64) error { return onList(fromCmdKVs(kvs), rev) },
		func(ev spi.Event) error { return onEvent(toEvent(ev)) }, watchOpts(opts)))
}
