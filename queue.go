package coord

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/errs"
)

// The queue behind Mutex, RWMutex, Semaphore, Election and Acquire.
//
// Each acquisition is one ephemeral key of the holder's session under the
// queue's prefix, named {kind}{16-hex session}{16-hex sequence}; the
// kind is absent under elections/. The key is created by a transaction
// that puts it only if absent and, in the same revision, reads the whole
// prefix, so one round trip both joins the queue and shows it. Queue
// order is create revision (FIFO). Whether an entry holds depends only
// on the entries before it (see blockers), so the holders at any
// revision are a function of the keys at that revision, as the cell sees
// them. A waiter watches only the few keys that block it (its
// predecessor, for a Mutex) plus its own key; when a blocker goes it
// re-reads the queue (linearizably) and either holds or finds what
// blocks it now. The fencing token is the entry's create revision.

// The kinds of queue entry, the first byte of a lock key's suffix.
const (
	kindMutex  = 'm' // Mutex and Acquire: exclusive
	kindWriter = 'w' // RWMutex.Lock: exclusive
	kindReader = 'r' // RWMutex.RLock: shared with other readers
	kindSlot   = 's' // Semaphore: shared by up to its limit (the key's value)
	kindLeader = 0   // Election: exclusive; election keys carry no kind byte
)

// keySeq numbers the acquisitions of this process. Session IDs are unique
// in the cell forever and a session lives in one process, so session plus
// sequence names each acquisition uniquely: a key is never reused, and a
// delayed or retried operation on an old acquisition's key can never touch
// a newer one.
var keySeq atomic.Uint64

// entry is one well-formed key of a queue.
type entry struct {
	kv    KV
	kind  byte
	limit int // kindSlot: the holder's semaphore limit
}

// parseQueue returns the well-formed entries among kvs, oldest first.
// Keys of another shape under the prefix (a lock whose name extends this
// one's, stray user keys) are not part of the queue.
func parseQueue(prefix string, kinded bool, kvs []KV) []entry {
	out := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		if e, ok := parseEntry(prefix, kinded, kv); ok {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return cmpInt64(a.kv.CreateRev, b.kv.CreateRev) })
	return out
}

func parseEntry(prefix string, kinded bool, kv KV) (entry, bool) {
	rest, ok := strings.CutPrefix(kv.Key, prefix)
	if !ok {
		return entry{}, false
	}
	e := entry{kv: kv, kind: kindLeader}
	if kinded {
		if len(rest) != 33 {
			return entry{}, false
		}
		e.kind, rest = rest[0], rest[1:]
		switch e.kind {
		case kindMutex, kindWriter, kindReader:
		case kindSlot:
			e.limit = parseLimit(kv.Value)
		default:
			return entry{}, false
		}
	}
	if len(rest) != 32 || strings.IndexFunc(rest, func(r rune) bool {
		return (r < '0' || r > '9') && (r < 'a' || r > 'f')
	}) >= 0 {
		return entry{}, false
	}
	return e, true
}

func parseLimit(v []byte) int {
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' || n > 1<<30 {
			return 1
		}
		n = n*10 + int(c-'0')
	}
	return max(n, 1)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// blockers returns the keys that keep q[i] from holding, nil if it holds.
// Every kind may share a name with every other without breaking any
// kind's promise: an exclusive entry holds only at the head; a reader
// when no non-reader is before it; a semaphore slot when no non-slot is
// before it and fewer than its limit slots are.
//
// The keys returned are the ones to watch: for an exclusive entry its
// predecessor; for a reader (and a slot blocked by another kind) the
// nearest entry before it of a kind that blocks it (those before that one
// cannot free it while that one stays); for a slot blocked by the limit,
// the limit entries right before it: any of them leaving frees a place,
// while an entry leaving further ahead does not change which entries
// those are.
func blockers(q []entry, i int) []string {
	me := q[i]
	conflicts := func(e entry) bool {
		switch me.kind {
		case kindReader:
			return e.kind != kindReader
		case kindSlot:
			return e.kind != kindSlot
		}
		return true
	}
	for j := i - 1; j >= 0; j-- {
		if conflicts(q[j]) {
			return []string{q[j].kv.Key}
		}
	}
	if me.kind == kindSlot && i >= me.limit {
		keys := make([]string, 0, me.limit)
		for _, e := range q[i-me.limit : i] {
			keys = append(keys, e.kv.Key)
		}
		return keys
	}
	return nil
}

// holders returns the entries of q that hold.
func holders(q []entry) []entry {
	var out []entry
	for i := range q {
		if blockers(q, i) == nil {
			out = append(out, q[i])
		}
	}
	return out
}

// queue is one handle's place in the queue under prefix: at most one
// acquisition at a time (slot), the current hold, if any (cur).
type queue struct {
	s      *Session
	prefix string
	kinded bool
	err    error // a bad name or limit, reported by every acquisition

	// slot holds a token from the start of an acquisition until its
	// release (or failure), so a second acquisition waits its turn.
	slot chan struct{}
	mu   sync.Mutex
	cur  *hold
}

func newQueue(s *Session, prefix string, kinded bool) *queue {
	return &queue{s: s, prefix: prefix, kinded: kinded, slot: make(chan struct{}, 1)}
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

func (q *queue) done() <-chan struct{} {
	if h := q.current(); h != nil {
		return h.done
	}
	return closedChan
}

func (q *queue) newKey(kind byte) string {
	var b strings.Builder
	b.Grow(len(q.prefix) + 33)
	b.WriteString(q.prefix)
	if q.kinded {
		b.WriteByte(kind)
	}
	fmt.Fprintf(&b, "%016x%016x", uint64(q.s.id), keySeq.Add(1))
	return b.String()
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
	w := &waiter{q: q, n: q.s.n, key: q.newKey(kind)}
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
	unsure := false // an earlier attempt may have deleted the key
	for {
		if err := q.s.Err(); err != nil {
			// The session's end deletes its keys in the cell: nothing is
			// left to release.
			q.drop(h)
			if unsure {
				return nil
			}
			return fmt.Errorf("%w: %s: %w", notHeld, name, err)
		}
		res, err := q.s.n.Txn(ctx).If(CreateRev(h.key).Eq(int64(h.token))).Then(OpDelete(h.key)).Commit()
		if err == nil {
			q.drop(h)
			if !res.Succeeded && !unsure {
				return fmt.Errorf("%w: %s: the hold with token %d had already ended", notHeld, name, h.token)
			}
			return nil
		}
		unsure = unsure || errors.Is(err, ErrAmbiguous)
		if !retryable(err) || q.s.n.backoff(ctx, q.s) != nil {
			q.drop(h)
			q.removeLater(h.key, int64(h.token))
			return err
		}
	}
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

// waiter is one acquisition on its way to holding.
type waiter struct {
	q   *queue
	n   *Node
	key string
	rev int64 // our key's create revision, once known
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
	q := w.q
	list, rev, err := w.create(ctx, value)
	if err != nil {
		if w.maybe && q.s.Err() == nil {
			w.abandon()
		}
		return nil, err
	}
	w.own = w.n.Watch(w.mctx, w.key, FromRev(rev))
	for {
		entries := parseQueue(q.prefix, q.kinded, list)
		i := slices.IndexFunc(entries, func(e entry) bool { return e.kv.Key == w.key })
		if i < 0 {
			return nil, w.lost(ctx)
		}
		wait := blockers(entries, i)
		if wait == nil {
			if err := q.s.Err(); err != nil {
				return nil, err
			}
			h := &hold{key: w.key, kind: kind, token: Token(w.rev), done: make(chan struct{}), stop: w.stop}
			go w.monitor(w.mctx, h)
			return h, nil
		}
		if try {
			w.abandon()
			return nil, fmt.Errorf("%w: %s", ErrLocked, strings.TrimSuffix(q.prefix, "/"))
		}
		probeNote(q.prefix, probeWait)
		if err := w.await(ctx, wait, rev); err != nil {
			return nil, err
		}
		probeNote(q.prefix, probeWake)
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
	q := w.q
	for {
		res, err := w.n.Txn(ctx).If(Version(w.key).Eq(0)).
			Then(OpPut(w.key, value, Ephemeral(q.s)), OpGetPrefix(q.prefix)).
			Else(OpGet(w.key), OpGetPrefix(q.prefix)).
			Commit()
		if err == nil {
			if len(res.Results[0].KVs) != 1 || res.Results[0].KVs[0].Session != q.s.id {
				return nil, 0, fmt.Errorf("%w: queue key %q is not this session's", errs.Internal, w.key)
			}
			w.rev = res.Results[0].KVs[0].CreateRev
			return res.Results[1].KVs, res.Rev, nil
		}
		if errors.Is(err, ErrSessionExpired) {
			if serr := q.s.Err(); serr != nil {
				return nil, 0, serr
			}
			return nil, 0, err
		}
		if errors.Is(err, ErrAmbiguous) {
			w.maybe = true
		}
		if err := w.retry(ctx, err); err != nil {
			return nil, 0, err
		}
	}
}

// retry decides whether err is worth another attempt and, if so, waits
// a moment first. It returns the error to give up with, or nil.
func (w *waiter) retry(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if serr := w.q.s.Err(); serr != nil {
		return serr
	}
	if !retryable(err) {
		return err
	}
	return w.n.backoff(ctx, w.q.s)
}

// retryable reports whether an operation that failed with err may
// succeed if tried again: its outcome was unknown, or no quorum was
// reachable at the time.
func retryable(err error) bool {
	return errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrNoQuorum)
}

// reread reads the queue again after a wake-up, from this member's own
// applied state: the change that woke us was applied here, so that state
// is at least as new as it, and it is a state the cell committed. If we
// are first in it, we were the holder at that revision, which is what a
// linearizable read would tell us too, a round trip later. (A stale view
// only makes us wait on a key that is already gone: its watch, from the
// view's revision, reports the delete at once.)
func (w *waiter) reread(ctx context.Context) ([]KV, int64, error) {
	kvs, rev, err := w.n.List(ctx, w.q.prefix, Serializable())
	if err != nil {
		return w.relist(ctx)
	}
	return kvs, rev, nil
}

// relist reads the queue again, linearizably.
func (w *waiter) relist(ctx context.Context) ([]KV, int64, error) {
	for {
		kvs, rev, err := w.n.List(ctx, w.q.prefix)
		if err == nil {
			return kvs, rev, nil
		}
		if err := w.retry(ctx, err); err != nil {
			w.giveUp(ctx)
			return nil, 0, err
		}
	}
}

// await watches the blocking keys, from rev on, and returns when one of
// them is deleted. It also returns, with the error to report, when our
// own key goes, the session ends or ctx ends.
func (w *waiter) await(ctx context.Context, keys []string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const fixed = 3 // ctx, session, own key
	cases := make([]reflect.SelectCase, fixed, fixed+len(keys))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.q.s.Done())}
	for _, k := range keys {
		ch := w.n.Watch(wctx, k, FromRev(rev)).Events()
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	cases[2] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.own.Events())}
	for {
		i, v, ok := reflect.Select(cases)
		switch {
		case i == 0:
			w.giveUp(ctx)
			return ctx.Err()
		case i == 1:
			return w.q.s.Err()
		case i == 2 && !ok:
			// Our own watch ended (history compacted, member closing):
			// start it again after the re-read the caller does next.
			if err := w.restartOwn(ctx); err != nil {
				return err
			}
			return nil
		case i == 2:
			if ev := v.Interface().(Event); ev.Type == EventDelete && ev.KV.Key == w.key {
				return w.lost(ctx)
			}
		case !ok:
			return nil // that watch ended: re-read the queue
		default:
			if ev := v.Interface().(Event); ev.Type == EventDelete && ev.KV.Key == keys[i-fixed] {
				return nil
			}
		}
	}
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
	w.own = w.n.Watch(w.mctx, w.key, FromRev(rev))
	return nil
}

// lost reports that our key went while we waited: with the session's
// error if the session ended (expiry and Close delete its keys), else as
// a deletion by someone else.
func (w *waiter) lost(ctx context.Context) error {
	// The member applies a session's end, then tells the session; wait
	// until the change that deleted the key has been fully applied here
	// so the session's state is current.
	w.n.settle(context.WithoutCancel(ctx))
	if err := w.q.s.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: queue key %q was deleted while waiting", ErrNotHeld, w.key)
}

// giveUp leaves the queue after the caller's ctx ended.
func (w *waiter) giveUp(ctx context.Context) {
	if ctx.Err() != nil && w.q.s.Err() == nil {
		w.abandon()
	}
}

// abandon removes our key so it does not block the queue: guarded by its
// create revision when we know it, by name otherwise (the name is ours
// alone). It tries for a bounded time in the caller's goroutine, then
// keeps trying in the background until the session ends.
func (w *waiter) abandon() {
	s := w.q.s
	ctx, cancel := context.WithTimeout(s.Ctx(), 2*w.n.electionTimeout())
	err := w.q.remove(ctx, w.key, w.rev)
	cancel()
	if err != nil && retryable(err) {
		w.q.removeLater(w.key, w.rev)
	}
}

// remove deletes key, guarded by its create revision rev unless rev is 0.
func (q *queue) remove(ctx context.Context, key string, rev int64) error {
	if rev != 0 {
		_, err := q.s.n.Txn(ctx).If(CreateRev(key).Eq(rev)).Then(OpDelete(key)).Commit()
		return err
	}
	_, err := q.s.n.Delete(ctx, key)
	return err
}

// removeLater keeps trying to remove key in the background while the cell
// is unreachable, until it succeeds or the session ends (which removes
// the key too).
func (q *queue) removeLater(key string, rev int64) {
	s := q.s
	if s.Err() != nil {
		return
	}
	go func() {
		for s.n.backoff(s.Ctx(), s) == nil {
			ctx, cancel := context.WithTimeout(s.Ctx(), 2*s.n.electionTimeout())
			err := q.remove(ctx, key, rev)
			cancel()
			if err == nil || !retryable(err) {
				return
			}
		}
	}()
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
				own = w.n.Watch(ctx, w.key, FromRev(rev))
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
	for {
		kvs, rev, err := w.n.List(ctx, w.key)
		if err == nil {
			return rev, slices.ContainsFunc(kvs, func(kv KV) bool { return kv.Key == w.key && kv.CreateRev == w.rev })
		}
		if errors.Is(err, ErrClosed) || w.n.backoff(ctx, w.q.s) != nil {
			return 0, false
		}
	}
}

// backoff waits a quarter election timeout before a retry, or returns
// the reason to stop: ctx ended, or the session s (if not nil) ended.
func (n *Node) backoff(ctx context.Context, s *Session) error {
	var ended <-chan struct{}
	if s != nil {
		ended = s.Done()
	}
	t := time.NewTimer(n.electionTimeout() / 4)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-ended:
		return s.Err()
	}
}

// settle waits until everything this member has applied so far has also
// been handed to its listeners (the watch hub and the sessions), so a
// session ended by a change a watcher has seen knows it has ended.
func (n *Node) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, n.electionTimeout())
	defer cancel()
	_ = n.raft.WaitApplied(ctx, n.sm.AppliedIndex())
}

// probes count, per queue prefix, how often waiters start waiting and
// wake up; only the package's tests register any (export_test.go), to
// show that a release wakes one waiter, not the herd.
var probes sync.Map // prefix -> *queueProbe

type queueProbe struct {
	mu      sync.Mutex
	counts  [3]int // by probeEvent
	changed chan struct{}
}

type probeEvent int

const (
	probeWait   probeEvent = iota // a waiter found itself blocked and began watching
	probeWake                     // a watched blocker went, and the waiter re-read the queue
	probeRelist                   // Observe's watch ended and it read the group again
)

func probeNote(prefix string, ev probeEvent) {
	v, ok := probes.Load(prefix)
	if !ok {
		return
	}
	p := v.(*queueProbe)
	p.mu.Lock()
	p.counts[ev]++
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}
