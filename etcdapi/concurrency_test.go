package etcdapi

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// waitKeys waits until prefix holds n keys.
func waitKeys(t *testing.T, cli *clientv3.Client, prefix string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		g, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && g.Count == int64(n)
	}, 20*time.Second, 10*time.Millisecond)
}

// TestMutexHandsOverInOrder: clientv3's concurrency.Mutex among three
// clients, each through its own member, is granted in queue order.
func TestMutexHandsOverInOrder(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	var ms []*concurrency.Mutex
	var clis []*clientv3.Client
	for i := range 3 {
		cli := f.client(t, f.eps[i])
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		ms = append(ms, concurrency.NewMutex(s, "/lock/"))
		clis = append(clis, cli)
	}
	require.NoError(t, ms[0].Lock(ctx))
	got := make(chan int, 3)
	var wg sync.WaitGroup
	for i := 1; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ms[i].Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			got <- i
		}()
		waitKeys(t, clis[0], "/lock/", i+1) // queued in order
	}
	require.NoError(t, ms[0].Unlock(ctx))
	first := <-got
	assert.Equal(t, 1, first)
	select {
	case i := <-got:
		t.Fatalf("waiter %d holds the lock with %d", i, first)
	default:
	}
	require.NoError(t, ms[1].Unlock(ctx))
	assert.Equal(t, 2, <-got)
	require.NoError(t, ms[2].Unlock(ctx))
	wg.Wait()

	// TryLock on a held lock fails with ErrLocked.
	require.NoError(t, ms[0].Lock(ctx))
	require.ErrorIs(t, ms[1].TryLock(ctx), concurrency.ErrLocked)
	require.NoError(t, ms[0].Unlock(ctx))
}

// TestElection: Campaign, Observe, Leader, Proclaim and Resign through
// clientv3's concurrency.Election.
func TestElection(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	var es []*concurrency.Election
	for i := range 2 {
		cli := f.client(t, f.eps[i])
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		es = append(es, concurrency.NewElection(s, "/elect/"))
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := f.client(t, f.eps[2])
	os, err := concurrency.NewSession(obs, concurrency.WithTTL(5))
	require.NoError(t, err)
	t.Cleanup(func() { os.Close() })
	seen := concurrency.NewElection(os, "/elect/").Observe(octx)

	require.NoError(t, es[0].Campaign(ctx, "first"))
	won := make(chan error, 1)
	go func() { won <- es[1].Campaign(ctx, "second") }()
	waitKeys(t, obs, "/elect/", 2)

	expect := func(v string) {
		t.Helper()
		for {
			select {
			case r := <-seen:
				if string(r.Kvs[0].Value) == v {
					return
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("never observed %q", v)
			}
		}
	}
	expect("first")
	l, err := es[1].Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "first", string(l.Kvs[0].Value))
	require.NoError(t, es[0].Proclaim(ctx, "first again"))
	expect("first again")
	select {
	case err := <-won:
		t.Fatalf("second won while first led: %v", err)
	default:
	}
	require.NoError(t, es[0].Resign(ctx))
	require.NoError(t, <-won)
	expect("second")
	require.NoError(t, es[1].Resign(ctx))
}

// TestSTM: concurrent increments through concurrency.NewSTM, at each
// isolation level, sum right.
func TestSTM(t *testing.T) {
	f := newFront(t, nil)
	ctx := tctx(t)
	for _, iso := range []concurrency.Isolation{concurrency.SerializableSnapshot, concurrency.Serializable, concurrency.RepeatableReads} {
		key := fmt.Sprintf("stm/%d", iso)
		const workers, each = 3, 10
		var wg sync.WaitGroup
		for w := range workers {
			cli := f.client(t, f.eps[w])
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					_, err := concurrency.NewSTM(cli, func(s concurrency.STM) error {
						n, _ := strconv.Atoi(s.Get(key))
						s.Put(key, strconv.Itoa(n+1))
						return nil
					}, concurrency.WithIsolation(iso), concurrency.WithAbortContext(ctx))
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		g, err := f.client(t).Get(ctx, key)
		require.NoError(t, err)
		require.Len(t, g.Kvs, 1)
		assert.Equal(t, strconv.Itoa(workers*each), string(g.Kvs[0].Value), "isolation %d", iso)
	}
}
