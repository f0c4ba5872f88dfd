package storage

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Pebble holds the durable image of the state machine, and it is written
// behind the applied index rather than on Apply's path: Apply builds its
// batch, hands it to the image writer and publishes the in-memory state,
// and the writer commits the batches in order, several at a time. Each
// batch carries its applied index, so the image on disk is always the
// state as of some applied index, and a restart replays the log from
// there (the log is compacted only after Store.Sync, which drains the
// writer first). Whatever reads Pebble expecting the applied state
// (History, snapshots, the address book, Sync and Close) drains it first.

// Bounds of the image writer.
const (
	// maxMergeBytes bounds one merged commit. Pebble handles a batch
	// larger than half a memtable as a memtable of its own, which forces
	// a flush; merged batches stay well under that.
	maxMergeBytes = 256 << 10
	// maxQueuedBytes bounds the batches waiting for the writer: Apply
	// waits beyond it, so a stalled disk holds memory to this much rather
	// than to the write rate.
	maxQueuedBytes = 64 << 20
)

// imageWriter commits the state machine's batches to Pebble in order, on
// a goroutine of its own.
type imageWriter struct {
	// fail records a commit error as the store's fault and returns the
	// fault to report (faults.fail); nil outside a Store.
	fail func(error) error
	// beforeCommit, if set, runs before each commit (tests hold the
	// writer with it).
	beforeCommit func()

	mu      sync.Mutex
	cond    sync.Cond // on mu: a batch queued, a commit done, stop
	queue   []*pebble.Batch
	queued  int    // bytes in queue
	pushed  uint64 // batches queued so far
	written uint64 // batches committed (or dropped after a fault) so far
	err     error  // the first commit error; nothing is committed after it
	stop    bool
	done    chan struct{}
}

func newImageWriter(fail func(error) error, beforeCommit func()) *imageWriter {
	w := &imageWriter{fail: fail, beforeCommit: beforeCommit, done: make(chan struct{})}
	w.cond.L = &w.mu
	go w.run()
	return w
}

// push queues b, which the writer commits and closes. It returns the
// writer's error instead (b is then the caller's), and waits while too
// much is queued.
func (w *imageWriter) push(b *pebble.Batch) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.queued > maxQueuedBytes && w.err == nil && !w.stop {
		w.cond.Wait()
	}
	if w.err != nil {
		return w.err
	}
	if w.stop {
		return ErrClosed
	}
	w.queue = append(w.queue, b)
	w.queued += len(b.Repr())
	w.pushed++
	w.cond.Broadcast()
	return nil
}

// failed returns the writer's error, or nil.
func (w *imageWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// drain waits until every batch queued before the call is in Pebble, and
// returns the writer's error if one was not.
func (w *imageWriter) drain() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	target := w.pushed
	for w.written < target && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}

// close commits what is queued, stops the writer, and returns its error.
func (w *imageWriter) close() error {
	w.mu.Lock()
	w.stop = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.done
	return w.failed()
}

func (w *imageWriter) run() {
	defer close(w.done)
	var batch []*pebble.Batch
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.stop {
			w.cond.Wait()
		}
		if len(w.queue) == 0 {
			w.mu.Unlock()
			return
		}
		// Take what fits one merged commit; the rest waits for the next.
		n, size := 0, 0
		for n < len(w.queue) && (n == 0 || size+len(w.queue[n].Repr()) <= maxMergeBytes) {
			size += len(w.queue[n].Repr())
			n++
		}
		batch = append(batch[:0], w.queue[:n]...)
		rest := copy(w.queue, w.queue[n:])
		clear(w.queue[rest:])
		w.queue = w.queue[:rest]
		failed := w.err != nil
		w.mu.Unlock()

		var err error
		if !failed {
			err = w.commit(batch)
		}
		for _, b := range batch {
			b.Close()
		}
		clear(batch)

		w.mu.Lock()
		if err != nil && w.err == nil {
			w.err = err
		}
		w.queued -= size
		w.written += uint64(n)
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// commit writes bs to Pebble in one commit. It does not sync: the Raft
// log holds the entries, and Store.Sync makes the image durable before
// the log drops them.
func (w *imageWriter) commit(bs []*pebble.Batch) (err error) {
	defer func() {
		if err != nil && w.fail != nil {
			err = w.fail(err)
		}
	}()
	// A failed write-ahead log write panics out of Commit as a fault the
	// Store has recorded (faultLogger.Fatalf). Deferred last, so it runs
	// first.
	defer recoverFault(&err)
	if w.beforeCommit != nil {
		w.beforeCommit()
	}
	b := bs[0]
	for _, next := range bs[1:] {
		if err := b.Apply(next, nil); err != nil {
			return fmt.Errorf("%w: storage: apply: merge batches: %w", ErrFault, err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("%w: storage: apply: commit: %w", ErrFault, err)
	}
	return nil
}

// syncImage waits until Pebble holds the state as of the applied index,
// for a sync that must cover it.
func (sm *StateMachine) syncImage() error {
	if err := sm.enter(); err != nil {
		return err
	}
	defer sm.life.RUnlock()
	return sm.drainImage()
}
