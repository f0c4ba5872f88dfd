package coord_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// The STM: etcd's concurrency.NewSTM over a Cell. Each isolation level
// is told from the next by the one case that separates them.

func balance(t *testing.T, tx *coord.STMTx, key string) int {
	t.Helper()
	v, err := tx.Get(key)
	require.NoError(t, err)
	n, err := strconv.Atoi(string(v))
	require.NoError(t, err, "key %s", key)
	return n
}

// TestSTMBankTransfer: goroutines on members and a client move money
// between accounts at random, each move an STM; whatever interleaves,
// no money is made or lost and no account goes below zero, at every
// serializable level (ReadCommitted does not promise it).
func TestSTMBankTransfer(t *testing.T) {
	for _, iso := range []coord.STMIsolation{coord.STMSerializableSnapshot, coord.STMSerializable, coord.STMRepeatableReads} {
		t.Run(iso.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { bankTransfer(t, iso) })
		})
	}
}

func bankTransfer(t *testing.T, iso coord.STMIsolation) {
	const accounts, workers, moves, start = 5, 6, 15, 100
	c := coordtest.NewCluster(t, 3, coordtest.WithClients())
	ctx := ctxT(t, 120*time.Second)
	cl := connect(t, c)
	cells := []coord.Cell{c.Node(0), c.Node(1), c.Node(2), cl}
	acct := func(i int) string { return fmt.Sprintf("bank/%d", i) }
	for i := range accounts {
		_, err := c.Node(0).Put(ctx, acct(i), []byte(strconv.Itoa(start)))
		require.NoError(t, err)
	}
	seed := c.Seed()
	var attempts, commits atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			cell := cells[w%len(cells)]
			for range moves {
				from, to := rng.IntN(accounts), rng.IntN(accounts-1)
				if to >= from {
					to++
				}
				amount := 1 + rng.IntN(40)
				_, err := coord.STM(ctx, cell, func(tx *coord.STMTx) error {
					attempts.Add(1)
					a, b := balance(t, tx, acct(from)), balance(t, tx, acct(to))
					if a < amount {
						return nil // not enough: move nothing
					}
					tx.Put(acct(from), []byte(strconv.Itoa(a-amount)))
					tx.Put(acct(to), []byte(strconv.Itoa(b+amount)))
					return nil
				}, coord.WithIsolation(iso))
				if err != nil {
					errc <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				commits.Add(1)
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("%v (seed %d)", err, seed)
	}
	kvs, _, err := c.Node(1).List(ctx, "bank/")
	require.NoError(t, err)
	total := 0
	for _, kv := range kvs {
		n, err := strconv.Atoi(string(kv.Value))
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, 0, "%s overdrawn (seed %d)", kv.Key, seed)
		total += n
	}
	require.Equal(t, accounts*start, total, "money made or lost (seed %d)", seed)
	require.Equal(t, int64(workers*moves), commits.Load())
	t.Logf("%d transfers in %d attempts (seed %d)", commits.Load(), attempts.Load(), seed)
}

// TestSTMReadYourWrites: inside the transaction its own writes are read
// back (a delete as nil), Rev stays the revision read, and nothing is
// written before the commit; through a Namespace too.
func TestSTMReadYourWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		n := c.Node(0)
		for _, cell := range []coord.Cell{n, coord.Namespace(n, "ns/")} {
			kv, err := cell.Put(ctx, "a", []byte("1"))
			require.NoError(t, err)
			res, err := coord.STM(ctx, cell, func(tx *coord.STMTx) error {
				v, err := tx.Get("a")
				require.NoError(t, err)
				require.Equal(t, "1", string(v))
				tx.Put("a", []byte("2"))
				tx.Put("b", []byte("new"))
				v, err = tx.Get("a")
				require.NoError(t, err)
				require.Equal(t, "2", string(v), "its own write")
				rev, err := tx.Rev("a")
				require.NoError(t, err)
				require.Equal(t, kv.ModRev, rev, "Rev is the revision read")
				tx.Delete("b")
				v, err = tx.Get("b")
				require.NoError(t, err)
				require.Nil(t, v, "its own delete")
				absent, err := tx.Rev("nothing")
				require.NoError(t, err)
				require.Zero(t, absent)
				_, err = cell.Get(ctx, "b")
				require.ErrorIs(t, err, coord.ErrNotFound, "nothing written before the commit")
				return nil
			})
			require.NoError(t, err)
			require.True(t, res.Succeeded)
			require.Len(t, res.Results, 2, "a put and a delete, in key order")
			got, err := cell.Get(ctx, "a")
			require.NoError(t, err)
			require.Equal(t, "2", string(got.Value))
			require.Equal(t, res.Rev, got.ModRev)
		}
	})
}

// interfere runs f the first time it is called only: the concurrent
// writer of a test, between two reads of one attempt.
func interfere(f func()) func() {
	var once sync.Once
	return func() { once.Do(f) }
}

// TestSTMConflictRetries: a key read is written by another before the
// commit: the commit conflicts, changes nothing, and the function runs
// again on the new value; WithRetries(0) gives up with ErrConflict.
func TestSTMConflictRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		n, other := c.Node(0), c.Node(1)
		_, err := n.Put(ctx, "counter", []byte("10"))
		require.NoError(t, err)
		incr := func(attempts *int, bump func()) func(*coord.STMTx) error {
			return func(tx *coord.STMTx) error {
				*attempts++
				v := balance(t, tx, "counter")
				bump()
				tx.Put("counter", []byte(strconv.Itoa(v+1)))
				return nil
			}
		}
		attempts := 0
		bump := interfere(func() {
			_, err := other.Put(ctx, "counter", []byte("100"))
			require.NoError(t, err)
		})
		_, err = coord.STM(ctx, n, incr(&attempts, bump))
		require.NoError(t, err)
		require.Equal(t, 2, attempts, "one conflict, one retry")
		got, err := n.Get(ctx, "counter")
		require.NoError(t, err)
		require.Equal(t, "101", string(got.Value), "the retry read the other's write")

		attempts = 0
		bump = interfere(func() {
			_, err := other.Put(ctx, "counter", []byte("200"))
			require.NoError(t, err)
		})
		_, err = coord.STM(ctx, n, incr(&attempts, bump), coord.WithRetries(0))
		require.ErrorIs(t, err, coord.ErrConflict)
		require.Equal(t, 1, attempts)
		got, err = n.Get(ctx, "counter")
		require.NoError(t, err)
		require.Equal(t, "200", string(got.Value), "the conflicting commit changed nothing")
	})
}

// TestSTMEnds: a context that ends stops the retries with its error, an
// error of the function is returned as it is with nothing written, and
// a failed read fails the STM even if the function ignores it.
func TestSTMEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		n := c.Node(0)
		_, err := n.Put(ctx, "k", []byte("0"))
		require.NoError(t, err)

		// Every attempt conflicts, until the context ends.
		cctx, cancel := context.WithCancel(ctx)
		attempts := 0
		_, err = coord.STM(cctx, n, func(tx *coord.STMTx) error {
			attempts++
			v := balance(t, tx, "k")
			_, err := c.Node(1).Put(ctx, "k", []byte(strconv.Itoa(v+1)))
			require.NoError(t, err)
			if attempts == 3 {
				cancel()
			}
			tx.Put("k", []byte("mine"))
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 3, attempts)
		got, err := n.Get(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, "3", string(got.Value))

		_, err = coord.STM(cctx, n, func(*coord.STMTx) error {
			t.Fatal("run with an ended context")
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)

		mine := errors.New("changed my mind")
		_, err = coord.STM(ctx, n, func(tx *coord.STMTx) error {
			tx.Put("k", []byte("x"))
			return mine
		})
		require.ErrorIs(t, err, mine)
		_, err = coord.STM(ctx, n, func(tx *coord.STMTx) error {
			_, _ = tx.Get("") // an invalid key, its error ignored
			tx.Put("k", []byte("x"))
			return nil
		})
		require.ErrorIs(t, err, coord.ErrInvalidKey)
		_, err = coord.STM(ctx, n, func(tx *coord.STMTx) error {
			tx.Put("k", []byte("x"), coord.IfVersion(1))
			return nil
		})
		require.ErrorIs(t, err, coord.ErrInvalidArgument, "conditions are the reads")
		got, err = n.Get(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, "3", string(got.Value), "nothing written by a failed STM")

		for _, opt := range []coord.STMOption{coord.WithIsolation(42), coord.WithRetries(-1)} {
			_, err = coord.STM(ctx, n, func(*coord.STMTx) error { return nil }, opt)
			require.ErrorIs(t, err, coord.ErrInvalidArgument)
		}
		_, err = coord.STM(ctx, n, nil)
		require.ErrorIs(t, err, coord.ErrInvalidArgument)
	})
}

// TestSTMIsolationLevels: a and b are written together by another
// between the transaction's reads of a and of b. Serializable reads b
// from the snapshot of a's read (a state that was); RepeatableReads
// reads b's new value beside a's old one (a state that never was). Both
// then conflict and run again on the new state. A key written blind
// (not read) and written by another meanwhile conflicts only under
// SerializableSnapshot; ReadCommitted conflicts on nothing.
func TestSTMIsolationLevels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 60*time.Second)
		n, other := c.Node(0), c.Node(1)
		pair := func(v int) {
			_, err := other.Txn(ctx).Then(coord.OpPut("a", []byte(strconv.Itoa(v))),
				coord.OpPut("b", []byte(strconv.Itoa(v)))).Commit()
			require.NoError(t, err)
		}

		seen := func(iso coord.STMIsolation) []string {
			pair(1)
			var views []string
			bump := interfere(func() { pair(2) })
			_, err := coord.STM(ctx, n, func(tx *coord.STMTx) error {
				a := balance(t, tx, "a")
				bump()
				b := balance(t, tx, "b")
				views = append(views, fmt.Sprintf("a=%d b=%d", a, b))
				tx.Put("sum", []byte(strconv.Itoa(a+b)))
				return nil
			}, coord.WithIsolation(iso))
			require.NoError(t, err)
			got, err := n.Get(ctx, "sum")
			require.NoError(t, err)
			require.Equal(t, "4", string(got.Value), "committed on the state that holds")
			return views
		}
		require.Equal(t, []string{"a=1 b=1", "a=2 b=2"}, seen(coord.STMSerializableSnapshot))
		require.Equal(t, []string{"a=1 b=1", "a=2 b=2"}, seen(coord.STMSerializable))
		require.Equal(t, []string{"a=1 b=2", "a=2 b=2"}, seen(coord.STMRepeatableReads))

		blind := func(iso coord.STMIsolation) (attempts int, out string) {
			bump := interfere(func() {
				_, err := other.Put(ctx, "out", []byte("theirs"))
				require.NoError(t, err)
			})
			_, err := coord.STM(ctx, n, func(tx *coord.STMTx) error {
				attempts++
				a := balance(t, tx, "a")
				bump()
				tx.Put("out", []byte(fmt.Sprint("mine ", a)))
				return nil
			}, coord.WithIsolation(iso))
			require.NoError(t, err)
			got, err := n.Get(ctx, "out")
			require.NoError(t, err)
			return attempts, string(got.Value)
		}
		for iso, want := range map[coord.STMIsolation]int{
			coord.STMSerializableSnapshot: 2, coord.STMSerializable: 1,
			coord.STMRepeatableReads: 1, coord.STMReadCommitted: 1,
		} {
			attempts, out := blind(iso)
			require.Equal(t, want, attempts, "%v: a blind write over another's", iso)
			require.Equal(t, "mine 2", out)
		}

		// ReadCommitted commits over a changed read.
		attempts := 0
		bump := interfere(func() { pair(3) })
		_, err := coord.STM(ctx, n, func(tx *coord.STMTx) error {
			attempts++
			a := balance(t, tx, "a")
			bump()
			tx.Put("copy", []byte(strconv.Itoa(a)))
			return nil
		}, coord.WithIsolation(coord.STMReadCommitted))
		require.NoError(t, err)
		require.Equal(t, 1, attempts)
		got, err := n.Get(ctx, "copy")
		require.NoError(t, err)
		require.Equal(t, "2", string(got.Value), "written from a read since overwritten")
	})
}

// TestSTMPrefetch: prefetched keys are read before the function runs,
// and a transaction that only reads commits nothing to the log yet
// checks its reads.
func TestSTMPrefetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithClients())
		ctx := ctxT(t, 60*time.Second)
		cl := connect(t, c)
		_, err := c.Node(0).Txn(ctx).Then(coord.OpPut("p/1", []byte("1")), coord.OpPut("p/2", []byte("2"))).Commit()
		require.NoError(t, err)
		attempts := 0
		bump := interfere(func() {
			_, err := c.Node(2).Put(ctx, "p/2", []byte("22"))
			require.NoError(t, err)
		})
		var views []string
		res, err := coord.STM(ctx, cl, func(tx *coord.STMTx) error {
			attempts++
			bump()
			views = append(views, fmt.Sprint(balance(t, tx, "p/1"), " ", balance(t, tx, "p/2")))
			return nil
		}, coord.WithPrefetch("p/1", "p/2"))
		require.NoError(t, err)
		require.Equal(t, 2, attempts, "the prefetch was read before the other's write")
		require.Equal(t, []string{"1 2", "1 22"}, views)
		require.Empty(t, res.Results, "a transaction that only read")
	})
}
