package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/coordcell/coord/internal/lockq"
)

// The queue behind Mutex, RWMutex, Semaphore, Election and Acquire.
//
// Each acquisition is one ephemeral key of the holder's session under the
// queue's prefix, named as internal/lockq writes it (lockq.EntryKey).
// The key is created by a transaction that puts it only if absent and,
// in the same revision, reads the whole prefix, so one round trip both joins the queue and shows it. Queue
// order is create revision (FIFO). Whether an entry holds depends only
// on the entries before it (see blockers), so the holders at any
// revision are a function of the keys at that revision, as the cell sees
// them. A waiter watches only the few keys that block it (its
// predecessor, for a Mutex) plus its own key; when a blocker goes it
// re-reads the queue (linearizably) and either holds or finds what
// blocks it now. The fencing token is the entry's create revision.
//
// Calls run one way: a queue starts a waiter per acquisition, and both
// leave the queue through a remover; nothing below calls back up.

// queue is one handle's place in the queue under prefix: at most one
// acquisition at a time (slot), the current hold, if any (cur).
type queue struct {
	s      *Session
	prefix string
	kinded bool
	err    error // a bad name or limit, reported by every acquisition
	rm     remover

	// slot holds a token from the start of an acquisition until its
	// release (or failure), so a second acquisition waits its turn.
	slot chan struct{}
	mu   sync.Mutex
	cur  *hold
}

func newQueue(s *Session, prefix string, kinded bool) *queue {
	return &queue{s: s, prefix: prefix, kinded: kinded, slot: make(chan struct{}, 1), rm: remover{s: s}}
}

// hold is one granted acquisition.
type hold struct {
	key   string
	kind  byte
	token Token
	done  chan struct{}      // closed by the monitor when the hold ends
	stop  context.CancelFunc // ends the monitor (and its watch)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (q *queue) current() *hold {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cur
}

func (q *queue) token() Token {
	if h := q.current(); h != nil {
		return h.token
	}
	return 0
}

func (q *queue) key() string {
	if h := q.current(); h != nil {
		return h.key
	}
	return ""
}

// isOwner is the comparison that holds while the current hold's key is
// still there with its create revision; without a hold, one that never
// holds (no create revision is negative).
func (q *queue) isOwner() Cmp {
	if h := q.current(); h != nil {
		return CreateRev(h.key).Eq(int64(h.token)).absolute()
	}
	return CreateRev(q.prefix).Lt(0).absolute()
}

func (q *queue) done() <-chan struct{} {
	if h := q.current(); h != nil {
		return h.done
	}
	return closedChan
}

func (q *queue) newKey(kind byte) string {
	return lockq.EntryKey(q.prefix, q.kinded, kind, int64(q.s.id), q.s.keySeq.Add(1))
}

// acquire joins the queue with a new entry of kind holding value and
// waits until it holds. With try it does not wait: it leaves the queue
// and returns ErrLocked unless it holds at once.
func (q *queue) acquire(ctx context.Context, kind byte, value []byte, try bool) (Token, error) {
	if q.err != nil {
		return 0, q.err
	}
	if try {
		select {
		case q.slot <- struct{}{}:
		default:
			return 0, fmt.Errorf("%w: %s: this handle already holds or is acquiring it", ErrLocked, strings.TrimSuffix(q.prefix, "/"))
		}
	} else {
		select {
		case q.slot <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-q.s.Done():
			return 0, q.s.Err()
		}
	}
	granted := false
	defer func() {
		if !granted {
			<-q.slot
		}
	}()
	if err := q.s.Err(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	key, err := q.resumedKey(ctx, kind)
	if err != nil {
		return 0, err
	}
	if key == "" {
		key = q.newKey(kind)
	}
	w := &waiter{s: q.s, b: q.s.b, prefix: q.prefix, kinded: q.kinded, key: key, rm: q.rm}
	// The hold's lifetime (its own-key watch and monitor) is the
	// session's, not the caller's ctx, which may end right after Lock.
	w.mctx, w.stop = context.WithCancel(q.s.Ctx())
	h, err := w.run(ctx, kind, value, try)
	if err != nil {
		w.stop()
		return 0, err
	}
	q.mu.Lock()
	q.cur = h
	q.mu.Unlock()
	granted = true
	return h.token, nil
}

// resumedKey returns, for an acquisition of kind on a resumed session,
// a key of this session's already in the queue that no other acquisition
// has taken over; "" when there is none (then a new key is made).
func (q *queue) resumedKey(ctx context.Context, kind byte) (string, error) {
	s := q.s
	if !s.resumed {
		return "", nil
	}
	var kvs []KV
	err := retry(ctx, s.b, s, retryable, func() (err error) {
		kvs, _, err = listPrefix(ctx, s.b, q.prefix, nil)
		return err
	})
	if err != nil {
		return "", err
	}
	entries := parseQueue(q.prefix, q.kinded, kvs)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(entries, func(e lockq.Waiter[KV]) bool {
		return e.Item.Session == s.id && (!q.kinded || e.Kind == kind) && !s.adopted[e.Key]
	})
	if i < 0 {
		return "", nil
	}
	s.adopted[entries[i].Key] = true
	return entries[i].Key, nil
}

// release ends the current hold with a delete guarded by its create
// revision, so it can only ever delete this acquisition's key. It retries
// while the outcome is unknown or the cell unreachable, until ctx ends.
// Whatever happens it frees the handle: if the release could not be
// confirmed it returns the error and goes on in the background until it
// succeeds or the session ends, so a handle is never stuck on a hold its
// holder has let go of. notHeld (ErrNotHeld or ErrNotLeader) is returned
// when there was no hold, or it had already ended.
func (q *queue) release(ctx context.Context, kind byte, notHeld error) error {
	name := strings.TrimSuffix(q.prefix, "/")
	h := q.current()
	if h == nil || h.kind != kind {
		return fmt.Errorf("%w: %s", notHeld, name)
	}
	if err := q.s.Err(); err != nil {
		// The session's end deleted its keys in the cell: nothing is
		// left to release.
		q.drop(h)
		return fmt.Errorf("%w: %s: %w", notHeld, name, err)
	}
	unsure := false // an earlier attempt may have deleted the key
	var res TxnResult
	err := retry(ctx, q.s.b, q.s, retryable, func() (err error) {
		res, err = newTxn(ctx, q.s.b).If(CreateRev(h.key).Eq(int64(h.token))).Then(OpDelete(h.key)).Commit()
		unsure = unsure || errors.Is(err, ErrAmbiguous)
		return err
	})
	q.drop(h)
	switch {
	case err == nil && !res.Succeeded && !unsure:
		return fmt.Errorf("%w: %s: the hold with token %d had already ended", notHeld, name, h.token)
	case err == nil:
		return nil
	case err == q.s.Err():
		// retry stopped because the session ended, deleting the key.
		if unsure {
			return nil
		}
		return fmt.Errorf("%w: %s: %w", notHeld, name, err)
	}
	q.rm.removeLater(h.key, int64(h.token))
	return err
}

// drop forgets h locally, once: its monitor ends (closing Done before
// drop returns) and the handle is free for the next acquisition.
func (q *queue) drop(h *hold) {
	q.mu.Lock()
	mine := q.cur == h
	if mine {
		q.cur = nil
	}
	q.mu.Unlock()
	if !mine {
		return
	}
	h.stop()
	<-h.done
	<-q.slot
}

// parseQueue returns the well-formed entries of the queue under prefix
// among kvs, oldest first (the grammar and the grant rules are
// internal/lockq's).
func parseQueue(prefix string, kinded bool, kvs []KV) []lockq.Waiter[KV] {
	return lockq.Queue(prefix, kinded, kvs, func(kv *KV) (string, int64, []byte) { return kv.Key, kv.CreateRev, kv.Value })
}
