package coord_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// electionTimeout is coordtest's: 20 ticks of 10ms.
const electionTimeout = 200 * time.Millisecond

func newSession(t *testing.T, ctx context.Context, n *coord.Node, ttl time.Duration) *coord.Session {
	t.Helper()
	s, err := n.NewSession(ctx, coord.WithTTL(ttl))
	require.NoError(t, err)
	return s
}

type tokenResult struct {
	token coord.Token
	err   error
}

// async runs an acquisition in a goroutine; its result arrives on the
// returned channel (buffered, so the goroutine never outlives the call).
func async(ctx context.Context, f func(context.Context) (coord.Token, error)) <-chan tokenResult {
	ch := make(chan tokenResult, 1)
	go func() {
		t, err := f(ctx)
		ch <- tokenResult{t, err}
	}()
	return ch
}

func recv[T any](t *testing.T, ctx context.Context, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("timed out waiting: %v", ctx.Err())
		var zero T
		return zero
	}
}

// members returns the cluster's running members, for a probe to count
// the waiters on.
func members(c *coordtest.Cluster) []*coord.Node {
	var ns []*coord.Node
	for i := range c.Size() {
		if n := c.Node(i); n != nil {
			ns = append(ns, n)
		}
	}
	return ns
}

// waitParked waits until the probe has seen n waiters start waiting in
// all, so a test knows its waiter is parked on its predecessor.
func waitParked(t *testing.T, ctx context.Context, p *coord.QueueProbe, n int) {
	t.Helper()
	require.NoError(t, p.WaitFor(ctx, func(waits, _ int) bool { return waits >= n }))
}

func lockKey(t *testing.T, ctx context.Context, n *coord.Node, name string, token coord.Token) string {
	t.Helper()
	kvs, _, err := n.List(ctx, "locks/"+name+"/")
	require.NoError(t, err)
	for _, kv := range kvs {
		if coord.Token(kv.CreateRev) == token {
			return kv.Key
		}
	}
	t.Fatalf("no key with token %d under lock %q", token, name)
	return ""
}

// TestMutexFIFOAndNoHerd queues 100 waiters (spread over the members) on
// one lock held by another, then releases holder after holder: the lock
// goes to the waiters in arrival order, and each release wakes exactly
// one waiter. A waiter that watched the whole queue (the herd) would wake
// at every release and the wake count would be quadratic.
func TestMutexFIFOAndNoHerd(t *testing.T) {
	t.Parallel() // waits on conditions only, so other tests' load cannot fail it
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		const name, waiters = "lock", 100
		probe := coord.ProbeLock(name, members(c)...)
		defer probe.Close()
		sessions := make([]*coord.Session, 3)
		for i := range sessions {
			sessions[i] = newSession(t, ctx, c.Node(i), 5*time.Second)
		}
		holder := coord.NewMutex(sessions[0], name)
		first, err := holder.Lock(ctx)
		require.NoError(t, err)

		granted := make(chan int, waiters)
		release := make([]chan struct{}, waiters)
		tokens := make([]coord.Token, waiters)
		var wg sync.WaitGroup
		for i := range waiters {
			release[i] = make(chan struct{})
			m := coord.NewMutex(sessions[i%3], name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				tokens[i] = tok
				granted <- i
				<-release[i]
				if err := m.Unlock(ctx); err != nil {
					t.Errorf("waiter %d unlock: %v", i, err)
				}
			}()
			// Arrival order is queue order: let waiter i join (and park on
			// its predecessor) before the next one starts.
			waitParked(t, ctx, probe, i+1)
		}
		_, wakes := probe.Counts()
		require.Zero(t, wakes, "nobody wakes while the holder holds")

		require.NoError(t, holder.Unlock(ctx))
		prev := first
		for i := range waiters {
			got := recv(t, ctx, granted)
			require.Equal(t, i, got, "the lock goes to the waiters in arrival order")
			require.Greater(t, tokens[got], prev, "tokens grow with every grant")
			prev = tokens[got]
			close(release[got])
		}
		wg.Wait()
		waits, wakes := probe.Counts()
		require.Equal(t, waiters, waits, "every waiter parked once")
		require.Equal(t, waiters, wakes, "each release woke exactly one waiter")
	})
}

// TestMutexPassesOnWhenHolderDies crashes the member of a holder (a
// follower, then the leader): its session expires and the lock passes to
// a waiter on another member within about TTL plus an election timeout.
func TestMutexPassesOnWhenHolderDies(t *testing.T) {
	t.Parallel()
	for _, holderIsLeader := range []bool{false, true} {
		t.Run(fmt.Sprintf("holderIsLeader=%v", holderIsLeader), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := coordtest.NewCluster(t, 3)
				ctx := ctxT(t, 20*time.Second)
				const ttl = time.Second
				name := "lock"
				probe := coord.ProbeLock(name, members(c)...)
				defer probe.Close()
				leader := c.LeaderIndex()
				h, w := (leader+1)%3, (leader+2)%3
				if holderIsLeader {
					h = leader
				}
				holder := coord.NewMutex(newSession(t, ctx, c.Node(h), ttl), name)
				t1, err := holder.Lock(ctx)
				require.NoError(t, err)
				waiter := coord.NewMutex(newSession(t, ctx, c.Node(w), ttl), name)

				_, err = waiter.TryLock(ctx)
				require.ErrorIs(t, err, coord.ErrLocked)
				kvs, _, err := c.Node(w).List(ctx, "locks/"+name+"/")
				require.NoError(t, err)
				require.Len(t, kvs, 1, "a failed TryLock leaves no key behind")
				require.Zero(t, waiter.Token())

				res := async(ctx, waiter.Lock)
				waitParked(t, ctx, probe, 1)
				crashed := time.Now()
				c.Crash(h)
				r := recv(t, ctx, res)
				elapsed := time.Since(crashed)
				require.NoError(t, r.err)
				require.Greater(t, r.token, t1)
				require.NoError(t, c.Node(w).CheckToken(ctx, name, r.token))
				t.Logf("the lock passed %v after the holder's member crashed (TTL %v)", elapsed, ttl)
				// The cell expires a silent session one TTL after its last
				// keep-alive (a new leader first waits out its own election);
				// allow two election timeouts for the expiry's commit, the
				// waiter's re-read and scheduling under -race.
				bound := ttl + electionTimeout + 2*electionTimeout
				if holderIsLeader {
					bound += electionTimeout
				}
				require.Less(t, elapsed, bound)
			})
		})
	}
}

// TestMutexStaleUnlockDoesNotReleaseNewerHold: a late or retried Unlock of
// an old hold never releases a newer hold by the same session
// (etcd#22082), because every acquisition has its own key and the delete
// is guarded by the hold's create revision.
func TestMutexStaleUnlockDoesNotReleaseNewerHold(t *testing.T) {
	t.Parallel() // waits on conditions only, so other tests' load cannot fail it
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(0)
	s := newSession(t, ctx, n, 2*time.Second)
	m1 := coord.NewMutex(s, "stale")
	t1, err := m1.Lock(ctx)
	require.NoError(t, err)
	key1 := lockKey(t, ctx, n, "stale", t1)
	require.NoError(t, m1.Unlock(ctx))

	m2 := coord.NewMutex(s, "stale")
	t2, err := m2.Lock(ctx)
	require.NoError(t, err)
	require.Greater(t, t2, t1)

	// The old handle's Unlock again, as a retry would.
	require.ErrorIs(t, m1.Unlock(ctx), coord.ErrNotHeld)
	// The exact delete the first Unlock sent, arriving late.
	res, err := n.Txn(ctx).If(coord.CreateRev(key1).Eq(int64(t1))).Then(coord.OpDelete(key1)).Commit()
	require.NoError(t, err)
	require.False(t, res.Succeeded)
	// Even an unguarded delete of the old key cannot touch the new hold.
	_, err = n.Delete(ctx, key1)
	require.NoError(t, err)
	require.NoError(t, n.CheckToken(ctx, "stale", t2), "the newer hold survives")
	select {
	case <-m2.Done():
		t.Fatal("the newer hold ended")
	default:
	}

	require.NoError(t, m2.Unlock(ctx))
	require.ErrorIs(t, m2.Unlock(ctx), coord.ErrNotHeld, "a repeated Unlock reports the hold is gone")
	require.ErrorIs(t, n.CheckToken(ctx, "stale", t2), coord.ErrStaleToken)
}

// TestTwoMutexesOnOneSessionExclude: two Mutexes on one session are two
// acquisitions and exclude each other (etcd#11360); one Mutex used by two
// goroutines behaves like sync.Mutex.
func TestTwoMutexesOnOneSessionExclude(t *testing.T) {
	t.Parallel() // waits on conditions only, so other tests' load cannot fail it
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	n := c.Node(1)
	probe := coord.ProbeLock("lock", members(c)...)
	defer probe.Close()
	s := newSession(t, ctx, n, 2*time.Second)
	m1, m2 := coord.NewMutex(s, "lock"), coord.NewMutex(s, "lock")
	t1, err := m1.Lock(ctx)
	require.NoError(t, err)
	_, err = m2.TryLock(ctx)
	require.ErrorIs(t, err, coord.ErrLocked)

	res := async(ctx, m2.Lock)
	waitParked(t, ctx, probe, 1)
	select {
	case r := <-res:
		t.Fatalf("second Mutex on the same session got the lock: %+v", r)
	default:
	}
	require.NoError(t, n.CheckToken(ctx, "lock", t1))
	require.NoError(t, m1.Unlock(ctx))
	r := recv(t, ctx, res)
	require.NoError(t, r.err)
	require.Greater(t, r.token, t1)

	// One Mutex, two goroutines: the second Lock waits for Unlock.
	_, err = m2.TryLock(ctx)
	require.ErrorIs(t, err, coord.ErrLocked, "TryLock on a Mutex that holds")
	again := async(ctx, m2.Lock)
	require.NoError(t, m2.Unlock(ctx))
	r2 := recv(t, ctx, again)
	require.NoError(t, r2.err)
	require.Greater(t, r2.token, r.token)
	require.Equal(t, r2.token, m2.Token())
	require.NoError(t, m2.Unlock(ctx))
}

// TestLockWaiterReturnsWhenItsSessionEnds: a waiter whose own session
// ends returns at once with the session's error, while the lock is still
// held by someone else (etcd#19597): closed, and expired while its member
// is cut off.
func TestLockWaiterReturnsWhenItsSessionEnds(t *testing.T) {
	t.Parallel() // no timing bounds: it waits for expiries, however long they take
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		const name = "lock"
		probe := coord.ProbeLock(name, members(c)...)
		defer probe.Close()
		leader := c.LeaderIndex()
		holder := coord.NewMutex(newSession(t, ctx, c.Node(leader), 2*time.Second), name)
		t1, err := holder.Lock(ctx)
		require.NoError(t, err)

		// Closed.
		other := (leader + 1) % 3
		s2 := newSession(t, ctx, c.Node(other), 2*time.Second)
		res := async(ctx, coord.NewMutex(s2, name).Lock)
		waitParked(t, ctx, probe, 1)
		require.NoError(t, s2.Close(ctx))
		r := recv(t, ctx, res)
		require.ErrorIs(t, r.err, coord.ErrSessionClosed)
		require.Zero(t, r.token)

		// Expired: the waiter's member is cut off, so its session cannot be
		// kept alive.
		cut := (leader + 2) % 3
		s3 := newSession(t, ctx, c.Node(cut), time.Second)
		res = async(ctx, coord.NewMutex(s3, name).Lock)
		waitParked(t, ctx, probe, 2)
		c.Isolate(cut)
		r = recv(t, ctx, res)
		require.ErrorIs(t, r.err, coord.ErrSessionExpired)
		require.Zero(t, r.token)
		c.Heal()

		require.NoError(t, c.Node(leader).CheckToken(ctx, name, t1), "the holder held throughout")
		select {
		case <-holder.Done():
			t.Fatal("the holder's hold ended")
		default:
		}
	})
}

// TestLockNeedsALiveSession: Lock returns a token only with a live
// session (etcd#11456); after the session ends it fails, with no token.
func TestLockNeedsALiveSession(t *testing.T) {
	t.Parallel() // no timing bounds: it waits for expiries, however long they take
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		leader := c.LeaderIndex()
		n := c.Node(leader)
		s := newSession(t, ctx, n, time.Second)
		m := coord.NewMutex(s, "live")
		tok, err := m.Lock(ctx)
		require.NoError(t, err)
		require.Positive(t, tok)
		require.NoError(t, s.Err())
		require.NoError(t, n.CheckToken(ctx, "live", tok))
		require.NoError(t, m.Unlock(ctx))

		require.NoError(t, s.Close(ctx))
		tok, err = m.Lock(ctx)
		require.ErrorIs(t, err, coord.ErrSessionClosed)
		require.Zero(t, tok)
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, coord.ErrSessionClosed)
		require.Zero(t, m.Token())

		// A session that expired while its member was cut off.
		cut := (leader + 1) % 3
		s2 := newSession(t, ctx, c.Node(cut), time.Second)
		c.Isolate(cut)
		recv(t, ctx, s2.Done())
		tok, err = coord.NewMutex(s2, "live").Lock(ctx)
		require.ErrorIs(t, err, coord.ErrSessionExpired)
		require.Zero(t, tok)
		c.Heal()
		kvs, _, err := n.List(ctx, "locks/live/")
		require.NoError(t, err)
		require.Empty(t, kvs, "no acquisition left a key")
	})
}

// TestMutexDoneFires: Mutex.Done is closed when the hold ends, whatever
// ends it (etcd#6127): Unlock, the key deleted by someone else, and the
// session expiring while the holder's member is cut off.
func TestMutexDoneFires(t *testing.T) {
	t.Parallel() // no timing bounds: it waits for expiries, however long they take
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		leader := c.LeaderIndex()
		n := c.Node(leader)
		s := newSession(t, ctx, n, 2*time.Second)
		m := coord.NewMutex(s, "done")
		select {
		case <-m.Done():
		default:
			t.Fatal("Done of a Mutex that does not hold must be closed")
		}

		_, err := m.Lock(ctx)
		require.NoError(t, err)
		done := m.Done()
		require.NoError(t, m.Unlock(ctx))
		recv(t, ctx, done)

		tok, err := m.Lock(ctx)
		require.NoError(t, err)
		done = m.Done()
		_, err = c.Node((leader+1)%3).Delete(ctx, lockKey(t, ctx, n, "done", tok))
		require.NoError(t, err)
		recv(t, ctx, done)
		require.Equal(t, tok, m.Token(), "a lost hold keeps its token until Unlock")
		require.ErrorIs(t, m.Unlock(ctx), coord.ErrNotHeld)

		cut := (leader + 1) % 3
		s2 := newSession(t, ctx, c.Node(cut), time.Second)
		m2 := coord.NewMutex(s2, "done")
		_, err = m2.Lock(ctx)
		require.NoError(t, err)
		c.Isolate(cut)
		recv(t, ctx, m2.Done())
		require.ErrorIs(t, s2.Err(), coord.ErrSessionExpired)
		require.ErrorIs(t, m2.Unlock(ctx), coord.ErrNotHeld)
		c.Heal()
		// The cell expires the session too, and the lock is free again.
		m3 := coord.NewMutex(s, "done")
		_, err = m3.Lock(ctx)
		require.NoError(t, err)
	})
}

// TestLockContextEndsWhileWaiting: a waiter whose ctx ends leaves the
// queue (so it blocks nobody) and returns ctx.Err().
func TestLockContextEndsWhileWaiting(t *testing.T) {
	t.Parallel() // waits on conditions only, so other tests' load cannot fail it
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	probe := coord.ProbeLock("lock", members(c)...)
	defer probe.Close()
	s := newSession(t, ctx, c.Node(0), 2*time.Second)
	holder := coord.NewMutex(s, "lock")
	t1, err := holder.Lock(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	res := async(wctx, coord.NewMutex(newSession(t, ctx, c.Node(1), 2*time.Second), "lock").Lock)
	waitParked(t, ctx, probe, 1)
	cancel()
	r := recv(t, ctx, res)
	require.ErrorIs(t, r.err, context.Canceled)
	kvs, _, err := c.Node(2).List(ctx, "locks/lock/")
	require.NoError(t, err)
	require.Len(t, kvs, 1)
	require.Equal(t, int64(t1), kvs[0].CreateRev)
	require.NoError(t, holder.Unlock(ctx))

	_, err = coord.NewMutex(s, "").Lock(ctx)
	require.ErrorIs(t, err, coord.ErrInvalidKey)
}

// TestRWMutexReadersShareWritersWaitFairly: readers hold together; a
// writer waits for them; a reader that comes after a waiting writer waits
// behind it (no writer starvation); the writer holds alone.
func TestRWMutexReadersShareWritersWaitFairly(t *testing.T) {
	t.Parallel() // waits on conditions only, so other tests' load cannot fail it
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 10*time.Second)
	const name = "rw"
	probe := coord.ProbeLock(name, members(c)...)
	defer probe.Close()
	sA := newSession(t, ctx, c.Node(0), 2*time.Second)
	sB := newSession(t, ctx, c.Node(1), 2*time.Second)
	r1, r2 := coord.NewRWMutex(sA, name), coord.NewRWMutex(sB, name)
	t1, err := r1.RLock(ctx)
	require.NoError(t, err)
	t2, err := r2.RLock(ctx)
	require.NoError(t, err, "readers share")

	w := coord.NewRWMutex(sA, name)
	wres := async(ctx, w.Lock)
	waitParked(t, ctx, probe, 1)
	r3 := coord.NewRWMutex(sB, name)
	r3res := async(ctx, r3.RLock)
	waitParked(t, ctx, probe, 2)

	require.NoError(t, r1.RUnlock(ctx))
	require.NoError(t, c.Node(2).CheckToken(ctx, name, t2))
	require.NoError(t, r2.RUnlock(ctx))
	wr := recv(t, ctx, wres)
	require.NoError(t, wr.err)
	require.Greater(t, wr.token, max(t1, t2))
	select {
	case r := <-r3res:
		t.Fatalf("a reader got in with the writer: %+v", r)
	default:
	}
	require.NoError(t, c.Node(2).CheckToken(ctx, name, wr.token))
	require.ErrorIs(t, w.RUnlock(ctx), coord.ErrNotHeld, "RUnlock of a write hold")
	require.NoError(t, w.Unlock(ctx))
	rr := recv(t, ctx, r3res)
	require.NoError(t, rr.err)
	require.Greater(t, rr.token, wr.token)
	require.NoError(t, r3.RUnlock(ctx))
}

// TestRWMutexWaitingWriterSessionExpires: while a writer holds, a waiting
// writer's session expires; the writer queued behind it wakes, but must
// not get in while the first writer holds (etcd#16221).
func TestRWMutexWaitingWriterSessionExpires(t *testing.T) {
	t.Parallel() // no timing bounds: it waits for expiries, however long they take
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		const name = "rw"
		probe := coord.ProbeLock(name, members(c)...)
		defer probe.Close()
		w1 := coord.NewRWMutex(newSession(t, ctx, c.Node(0), 2*time.Second), name)
		t1, err := w1.Lock(ctx)
		require.NoError(t, err)

		s2 := newSession(t, ctx, c.Node(1), time.Second)
		w2res := async(ctx, coord.NewRWMutex(s2, name).Lock)
		waitParked(t, ctx, probe, 1)
		w3 := coord.NewRWMutex(newSession(t, ctx, c.Node(2), 2*time.Second), name)
		w3res := async(ctx, w3.Lock)
		waitParked(t, ctx, probe, 2)
		r := coord.NewRWMutex(newSession(t, ctx, c.Node(1), 2*time.Second), name)
		rres := async(ctx, r.RLock)
		waitParked(t, ctx, probe, 3)

		// s2 stops being kept alive; the cell expires it and deletes the
		// waiting writer's key, which w3 watches.
		s2.Orphan()
		require.ErrorIs(t, recv(t, ctx, w2res).err, coord.ErrSessionClosed)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = probe.WaitFor(wctx, func(waits, wakes int) bool { return wakes >= 1 && waits >= 4 })
		cancel()
		select {
		case res := <-w3res:
			t.Fatalf("a second writer got in while the first held: %+v", res)
		case res := <-rres:
			t.Fatalf("a reader got in while a writer held: %+v", res)
		default:
		}
		require.NoError(t, err, "w3 wakes, re-reads the queue and waits again")
		require.NoError(t, c.Node(1).CheckToken(ctx, name, t1))

		require.NoError(t, w1.Unlock(ctx))
		got := recv(t, ctx, w3res)
		require.NoError(t, got.err)
		require.Greater(t, got.token, t1)
		require.NoError(t, w3.Unlock(ctx))
		require.NoError(t, recv(t, ctx, rres).err)
		require.NoError(t, r.RUnlock(ctx))
	})
}

// TestSemaphoreAtMostNInOrder: n holders at most, granted FIFO, including
// when places free up out of order and a waiter gives up.
func TestSemaphoreAtMostNInOrder(t *testing.T) {
	t.Parallel() // waits on conditions only, so other tests' load cannot fail it
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	const name, n = "sem", 2
	probe := coord.ProbeLock(name, members(c)...)
	defer probe.Close()
	s := []*coord.Session{
		newSession(t, ctx, c.Node(0), 2*time.Second),
		newSession(t, ctx, c.Node(1), 2*time.Second),
		newSession(t, ctx, c.Node(2), 2*time.Second),
	}
	sem := func(i int) *coord.Semaphore { return coord.NewSemaphore(s[i%3], name, n) }
	a, b := sem(0), sem(1)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	_, err = b.Acquire(ctx)
	require.NoError(t, err)

	cs, d, e := sem(2), sem(0), sem(1)
	cctx, cancelC := context.WithCancel(ctx)
	cres := async(cctx, cs.Acquire)
	waitParked(t, ctx, probe, 1)
	dres := async(ctx, d.Acquire)
	waitParked(t, ctx, probe, 2)
	eres := async(ctx, e.Acquire)
	waitParked(t, ctx, probe, 3)

	// C gives up: D moves up to the head of the waiters; then the second
	// holder (not the first) leaves, and D gets the place, not E.
	cancelC()
	require.ErrorIs(t, recv(t, ctx, cres).err, context.Canceled)
	require.NoError(t, b.Release(ctx))
	require.NoError(t, recv(t, ctx, dres).err)
	select {
	case r := <-eres:
		t.Fatalf("E got a third place: %+v", r)
	default:
	}
	require.NoError(t, a.Release(ctx))
	require.NoError(t, recv(t, ctx, eres).err)
	require.NoError(t, d.Release(ctx))
	require.NoError(t, e.Release(ctx))

	// Many users: never more than n at once.
	var in, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := sem(i)
			for range 4 {
				if _, err := m.Acquire(ctx); err != nil {
					t.Error(err)
					return
				}
				cur := in.Add(1)
				for {
					old := most.Load()
					if cur <= old || most.CompareAndSwap(old, cur) {
						break
					}
				}
				in.Add(-1)
				if err := m.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int32(n))

	_, err = coord.NewSemaphore(s[0], name, 0).Acquire(ctx)
	require.ErrorIs(t, err, coord.ErrInvalidArgument)
}

// TestLease: Acquire returns a token and a deadline; Renew extends it;
// without Renew the lease expires and the next Acquire gets a greater
// token; an Acquire whose deadline runs out while the lock is held fails
// with ErrTimeout.
func TestLease(t *testing.T) {
	t.Parallel() // no timing bounds: it waits for expiries, however long they take
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		const ttl = time.Second
		l1, err := c.Node(0).Acquire(ctx, "lease", ttl)
		require.NoError(t, err)
		require.Positive(t, l1.Token)
		require.True(t, l1.Until.After(time.Now()))

		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = c.Node(1).Acquire(short, "lease", ttl)
		cancel()
		require.ErrorIs(t, err, coord.ErrTimeout)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		before := l1.Until
		until, err := l1.Renew(ctx)
		require.NoError(t, err)
		require.True(t, until.After(before))
		require.Equal(t, until, l1.Until)

		// No more renewals: the lease runs out and passes on.
		l2, err := c.Node(1).Acquire(ctx, "lease", ttl)
		require.NoError(t, err)
		require.Greater(t, l2.Token, l1.Token)
		recv(t, ctx, l1.Done())
		_, err = l1.Renew(ctx)
		require.Error(t, err)
		require.ErrorIs(t, l1.Release(ctx), coord.ErrNotHeld)
		require.ErrorIs(t, c.Node(2).CheckToken(ctx, "lease", l1.Token), coord.ErrStaleToken)
		require.NoError(t, c.Node(2).CheckToken(ctx, "lease", l2.Token))

		require.NoError(t, l2.Release(ctx))
		l3, err := c.Node(2).Acquire(ctx, "lease", ttl)
		require.NoError(t, err)
		require.Greater(t, l3.Token, l2.Token)
		require.NoError(t, l3.Release(ctx))

		_, err = c.Node(0).Acquire(ctx, "lease", time.Millisecond)
		require.ErrorIs(t, err, coord.ErrInvalidTTL)
	})
}
