// Package watch serves prefix watches from a member's applied state.
//
// The change history in storage is the source of truth: a watcher reads
// the revisions after the last one it delivered, so it can never skip or
// repeat one, whatever the member goes through (restart, snapshot
// install). The hub keeps the most recent revisions in memory so that
// watchers keeping up never touch Pebble, and wakes them with one closed
// channel per batch of revisions instead of a send per watcher, so the
// apply loop never blocks on a watcher.
package watch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage"
)

// History is the durable change history the hub falls back to.
type History interface {
	History(fromRev int64, limit int) ([]storage.Revision, error)
	Revision() int64
}

// Hub fans applied revisions out to the member's watchers.
type Hub struct {
	hist     History
	capacity int

	mu     sync.RWMutex
	recent []storage.Revision // consecutive revisions, oldest first
	wake   chan struct{}      // closed and replaced on every publish
}

// NewHub returns a hub over hist that keeps up to capacity recent
// revisions in memory.
func NewHub(hist History, capacity int) *Hub {
	if capacity <= 0 {
		capacity = 4096
	}
	return &Hub{hist: hist, capacity: capacity, wake: make(chan struct{})}
}

// Publish records newly applied revisions (in order) and wakes watchers.
// It is called on the apply goroutine and never blocks on a watcher.
func (h *Hub) Publish(revs []storage.Revision) {
	h.mu.Lock()
	if len(revs) > 0 {
		if n := len(h.recent); n > 0 && h.recent[n-1].Rev+1 != revs[0].Rev {
			h.recent = h.recent[:0] // not consecutive: start over
		}
		h.recent = append(h.recent, revs...)
		if over := len(h.recent) - h.capacity; over > 0 {
			// Copy down rather than reslice so the backing array does not
			// keep growing.
			h.recent = append(h.recent[:0], h.recent[over:]...)
		}
	}
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
}

// Reset forgets the in-memory revisions (the state machine was replaced
// by a snapshot) and wakes watchers to re-read from storage.
func (h *Hub) Reset() {
	h.mu.Lock()
	h.recent = nil
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
}

// read returns up to limit revisions after from, and a channel that is
// closed when more may be available.
func (h *Hub) read(from int64, limit int) ([]storage.Revision, <-chan struct{}, error) {
	h.mu.RLock()
	wake := h.wake
	if n := len(h.recent); n > 0 && h.recent[0].Rev <= from+1 {
		if from >= h.recent[n-1].Rev {
			// Caught up with what was published: anything newer is
			// published (and wakes us) right after it is applied.
			h.mu.RUnlock()
			return nil, wake, nil
		}
		i := int(from + 1 - h.recent[0].Rev)
		end := min(i+limit, n)
		out := h.recent[i:end:end]
		h.mu.RUnlock()
		return out, wake, nil
	}
	h.mu.RUnlock()
	revs, err := h.hist.History(from, limit)
	if errors.Is(err, storage.ErrCompacted) {
		return nil, wake, fmt.Errorf("%w: %v", errs.Compacted, err)
	}
	return revs, wake, err
}

// Watch hands the events under prefix with revision > from to emit, in
// revision order, until ctx ends, emit returns false, or an error occurs;
// it then returns the reason (ctx.Err() or ErrCompacted). emit may block:
// only this watch waits for it.
func (h *Hub) Watch(ctx context.Context, prefix string, from int64, emit func(rev int64, ev storage.Event) bool) error {
	const batch = 256
	for {
		revs, wake, err := h.read(from, batch)
		if err != nil {
			return err
		}
		for _, r := range revs {
			for _, ev := range r.Events {
				if !strings.HasPrefix(ev.KV.Key, prefix) {
					continue
				}
				if !emit(r.Rev, ev) {
					return ctx.Err()
				}
			}
			from = r.Rev
		}
		if len(revs) > 0 {
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
