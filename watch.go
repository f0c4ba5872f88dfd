package coord

import (
	"context"
	"sync"

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
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	}
	return "UNKNOWN"
}

// Event is one change to one key. The changes of one revision (one
// transaction, one session expiry) arrive one after another, in the order
// they were applied.
type Event struct {
	Type EventType
	// KV is the key after a put; after a delete, the key with its last
	// Version and CreateRev, an empty value, and ModRev = the delete's
	// revision.
	KV KV
	// Rev is the cell revision of the change.
	Rev int64
}

// WatchOption configures a watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	fromRev int64
	set     bool
}

// FromRev starts the watch after revision rev: the watcher receives every
// change with a revision greater than rev. Pass the revision List
// returned to continue gap-free from a listing. A rev older than the
// retained history ends the watch with ErrCompacted.
func FromRev(rev int64) WatchOption {
	return func(o *watchOptions) { o.fromRev, o.set = rev, true }
}

// Watcher streams the changes under a prefix. It is served by the member
// it was started on, from that member's applied state.
type Watcher struct {
	events chan Event
	cancel context.CancelFunc
	mu     sync.Mutex
	err    error
}

// Watch streams every change to keys under prefix, from this member's
// current revision (or from FromRev) until ctx ends or Close is called.
// Changes arrive in revision order, each exactly once, with no gaps. A
// member that lags the leader starts a little in the past, so nothing
// after the call is missed; for an exact start, List and pass its
// revision to FromRev.
func (n *Node) Watch(ctx context.Context, prefix string, opts ...WatchOption) *Watcher {
	var o watchOptions
	for _, f := range opts {
		f(&o)
	}
	if !o.set {
		o.fromRev = n.sm.Revision()
	}
	ctx, cancel := context.WithCancel(ctx)
	// The watch also ends when the node closes.
	stop := context.AfterFunc(n.closing, cancel)
	w := &Watcher{events: make(chan Event, 64), cancel: cancel}
	go func() {
		defer stop()
		err := n.hub.Watch(ctx, prefix, o.fromRev, func(rev int64, ev storage.Event) bool {
			select {
			case w.events <- toEvent(rev, ev):
				return true
			case <-ctx.Done():
				return false
			}
		})
		if n.closing.Err() != nil {
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
// consumer that falls behind holds back only its own watch. It is closed
// when the watch ends; Err then says why.
func (w *Watcher) Events() <-chan Event { return w.events }

// Err returns why the watch ended: the context's error, ErrCompacted, or
// ErrClosed. nil while it runs.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close ends the watch.
func (w *Watcher) Close() { w.cancel() }

func toEvent(rev int64, ev storage.Event) Event {
	t := EventPut
	if ev.Type == storage.EventDelete {
		t = EventDelete
	}
	return Event{Type: t, KV: fromCmdKV(ev.KV), Rev: rev}
}
