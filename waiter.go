package coord

// A waiter is one acquisition of a queue on its way to holding: it joins,
// watches only the keys that block it, and, once it holds, monitors its
// own key so the hold's Done closes when the key goes.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/lockq"
	"github.com/coordcell/coord/internal/spi"
)

// waiter is one acquisition on its way to holding: of session s, in the
// queue under prefix (kinded: a lock's). It leaves the queue through rm,
// never through the queue that started it.
type waiter struct {
	s      *Session
	b      *cellOps
	prefix string
	kinded bool
	rm     remover
	key    string
	rev    int64 // our key's create revision, once known
	// maybe is set when a create attempt's outcome was unknown, so the
	// key may exist although no attempt saw it.
	maybe bool
	// mctx is the hold's lifetime: the session's, until stop (drop). The
	// own-key watch and the monitor run in it.
	mctx context.Context
	stop context.CancelFunc
	own  *Watcher
}

// run creates the key and waits until it holds. On failure it has left
// the queue (or will, in the background, if the cell is unreachable now).
func (w *waiter) run(ctx context.Context, kind byte, value []byte, try bool) (*hold, error) {
	list, rev, err := w.create(ctx, value)
	if err != nil {
		if w.maybe && w.s.Err() == nil {
			w.abandon()
		}
		return nil, err
	}
	w.own = w.watch(w.mctx, w.key, rev)
	for {
		entries := parseQueue(w.prefix, w.kinded, list)
		i := slices.IndexFunc(entries, func(e lockq.Waiter[KV]) bool { return e.Key == w.key })
		if i < 0 {
			return nil, w.lost(ctx)
		}
		wait := lockq.Blockers(entries, i)
		if wait == nil {
			if err := w.s.Err(); err != nil {
				return nil, err
			}
			h := &hold{key: w.key, kind: kind, token: Token(w.rev), done: make(chan struct{}), stop: w.stop}
			go w.monitor(w.mctx, h)
			return h, nil
		}
		if try {
			w.abandon()
			return nil, fmt.Errorf("%w: %s", ErrLocked, strings.TrimSuffix(w.prefix, "/"))
		}
		w.b.queueProbes().Note(w.prefix, spi.ProbeWait)
		if err := w.await(ctx, wait, rev); err != nil {
			return nil, err
		}
		w.b.queueProbes().Note(w.prefix, spi.ProbeWake)
		if list, rev, err = w.reread(ctx); err != nil {
			return nil, err
		}
	}
}

// create puts the key if absent and reads the queue in the same
// revision. The transaction is idempotent (the key name is ours alone),
// so it is retried while the outcome is unknown or the cell unreachable:
// a retry after an unseen success finds the key and reads it back.
func (w *waiter) create(ctx context.Context, value []byte) ([]KV, int64, error) {
	var res TxnResult
	err := retry(ctx, w.b, w.s, func(err error) bool {
		w.maybe = w.maybe || errors.Is(err, ErrAmbiguous)
		return retryable(err)
	}, func() (err error) {
		res, err = newTxn(ctx, w.b).If(Version(w.key).Eq(0)).
			Then(OpPut(w.key, value, Ephemeral(w.s)), OpGetPrefix(w.prefix)).
			Else(OpGet(w.key), OpGetPrefix(w.prefix)).
			Commit()
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if len(res.Results[0].KVs) != 1 || res.Results[0].KVs[0].Session != w.s.id {
		return nil, 0, fmt.Errorf("%w: queue key %q is not this session's", errs.Internal, w.key)
	}
	w.rev = res.Results[0].KVs[0].CreateRev
	return res.Results[1].KVs, res.Rev, nil
}

// reread reads the queue again after a wake-up, from this member's own
// applied state: the change that woke us was applied here, so that state
// is at least as new as it, and it is a state the cell committed. If we
// are first in it, we were the holder at that revision, which is what a
// linearizable read would tell us too, a round trip later. (A stale view
// only makes us wait on a key that is already gone: its watch, from the
// view's revision, reports the delete at once.)
func (w *waiter) reread(ctx context.Context) ([]KV, int64, error) {
	kvs, rev, err := listPrefix(ctx, w.b, w.prefix, []ReadOption{Serializable()})
	if err != nil {
		return w.relist(ctx)
	}
	return kvs, rev, nil
}

// relist reads the queue again, linearizably.
func (w *waiter) relist(ctx context.Context) (kvs []KV, rev int64, err error) {
	err = retry(ctx, w.b, w.s, retryable, func() (err error) {
		kvs, rev, err = listPrefix(ctx, w.b, w.prefix, nil)
		return err
	})
	if err != nil {
		w.giveUp(ctx)
		return nil, 0, err
	}
	return kvs, rev, nil
}

// watch watches key from rev.
func (w *waiter) watch(ctx context.Context, key string, rev int64) *Watcher {
	return startWatch(ctx, w.b, key, []WatchOption{FromRev(rev)})
}

// await watches the blocking keys, from rev on, and returns when one of
// them is deleted. It also returns, with the error to report, when our
// own key goes, the session ends or ctx ends.
func (w *waiter) await(ctx context.Context, keys []string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watches := make([]*Watcher, len(keys))
	for i, k := range keys {
		watches[i] = w.watch(wctx, k, rev)
	}
	gone := anyGone(keys, watches)
	for {
		select {
		case <-ctx.Done():
			w.giveUp(ctx)
			return ctx.Err()
		case <-w.s.Done():
			return w.s.Err()
		case ev, ok := <-w.own.Events():
			if !ok {
				// Our own watch ended (history compacted, member closing):
				// start it again after the re-read the caller does next.
				return w.restartOwn(ctx)
			}
			if ev.Type == EventDelete && ev.KV.Key == w.key {
				return w.lost(ctx)
			}
		case <-gone:
			return nil // a blocker went, or its watch ended: re-read the queue
		}
	}
}

// anyGone fans the blockers' watches in: the channel it returns is closed
// once one of them reports its key deleted, or ends. Its goroutines end
// with the watches.
func anyGone(keys []string, watches []*Watcher) <-chan struct{} {
	gone := make(chan struct{})
	var once sync.Once
	for i, wt := range watches {
		go func() {
			for ev := range wt.Events() {
				if ev.Type == EventDelete && ev.KV.Key == keys[i] {
					break
				}
			}
			once.Do(func() { close(gone) })
		}()
	}
	return gone
}

// restartOwn replaces an ended own-key watch, from a fresh linearizable
// read that shows whether the key is still there.
func (w *waiter) restartOwn(ctx context.Context) error {
	kvs, rev, err := w.relist(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(kvs, func(kv KV) bool { return kv.Key == w.key && kv.CreateRev == w.rev }) {
		return w.lost(ctx)
	}
	if err := w.own.Err(); errors.Is(err, ErrClosed) {
		return err
	}
	w.own = w.watch(w.mctx, w.key, rev)
	return nil
}

// lost reports that our key went while we waited: with the session's
// error if the session ended (expiry and Close delete its keys), else as
// a deletion by someone else.
func (w *waiter) lost(ctx context.Context) error {
	// The member applies a session's end, then tells the session; wait
	// until the change that deleted the key has been fully applied here
	// so the session's state is current.
	w.b.settle(context.WithoutCancel(ctx))
	if err := w.s.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: queue key %q was deleted while waiting", ErrNotHeld, w.key)
}

// giveUp leaves the queue after the caller's ctx ended.
func (w *waiter) giveUp(ctx context.Context) {
	if ctx.Err() != nil && w.s.Err() == nil {
		w.abandon()
	}
}

// abandon removes our key so it does not block the queue: guarded by its
// create revision when we know it, by name otherwise (the name is ours
// alone). It tries for a bounded time in the caller's goroutine, then
// keeps trying in the background until the session ends.
func (w *waiter) abandon() {
	ctx, cancel := context.WithTimeout(w.s.Ctx(), 2*w.b.electionTimeout())
	err := w.rm.remove(ctx, w.key, w.rev)
	cancel()
	if err != nil && retryable(err) {
		w.rm.removeLater(w.key, w.rev)
	}
}

// monitor closes h.done when the hold ends: our key deleted (by Unlock,
// the session's end, or anyone), the session ended, or drop. It keeps
// the watch on our key that the wait started, so no change is missed.
func (w *waiter) monitor(ctx context.Context, h *hold) {
	defer close(h.done)
	own := w.own
	for {
		select {
		case ev, ok := <-own.Events():
			if !ok {
				if ctx.Err() != nil || errors.Is(own.Err(), ErrClosed) {
					return
				}
				rev, held := w.stillHeld(ctx)
				if !held {
					return
				}
				own = w.watch(ctx, w.key, rev)
				continue
			}
			if ev.Type == EventDelete && ev.KV.Key == w.key {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// stillHeld reads (linearizably, retrying until ctx ends) whether our key
// is still there, and the revision of the read.
func (w *waiter) stillHeld(ctx context.Context) (int64, bool) {
	var (
		kvs []KV
		rev int64
	)
	err := retry(ctx, w.b, w.s, notClosed, func() (err error) {
		kvs, rev, err = listPrefix(ctx, w.b, w.key, nil)
		return err
	})
	if err != nil {
		return 0, false
	}
	return rev, slices.ContainsFunc(kvs, func(kv KV) bool { return kv.Key == w.key && kv.CreateRev == w.rev })
}

// remover takes a session's entries out of a queue: the queue's release
// and its waiters' retreats alike.
type remover struct{ s *Session }

// remove deletes key, guarded by its create revision rev unless rev is 0.
func (r remover) remove(ctx context.Context, key string, rev int64) error {
	if rev != 0 {
		_, err := newTxn(ctx, r.s.b).If(CreateRev(key).Eq(rev)).Then(OpDelete(key)).Commit()
		return err
	}
	_, err := deleteKey(ctx, r.s.b, key, nil)
	return err
}

// removeLater keeps trying to remove key in the background while the cell
// is unreachable, until it succeeds or the session ends (which removes
// the key too).
func (r remover) removeLater(key string, rev int64) {
	s := r.s
	if s.Err() != nil {
		return
	}
	go func() {
		if backoff(s.Ctx(), s.b, s) != nil {
			return
		}
		_ = retry(s.Ctx(), s.b, s, retryable, func() error {
			ctx, cancel := context.WithTimeout(s.Ctx(), 2*s.b.electionTimeout())
			defer cancel()
			return r.remove(ctx, key, rev)
		})
	}()
}
