package etcdapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/internal/histcheck"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLinearizableThroughClientv3: clientv3 clients doing puts, gets and
// compare-and-sets on a few keys through the etcd front, while a member
// crashes mid-run; the history must be linearizable. A failed write may
// have happened: it stays open to the end, as Jepsen treats it; a failed
// read says nothing and is left out.
func TestLinearizableThroughClientv3(t *testing.T) {
	seed := rand.Int64()
	f := newFront(t, []coordtest.Option{coordtest.WithSeed(seed)})
	keys := []string{"r0", "r1", "r2"}
	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
	)
	record := func(client int, in histcheck.Input, o opOut, call, ret time.Time) {
		out := o.Output
		mu.Lock()
		defer mu.Unlock()
		r := ret.Sub(start).Nanoseconds()
		if out.Ambiguous {
			r = math.MaxInt64
		}
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Output: out,
			Call: call.Sub(start).Nanoseconds(), Return: r})
	}
	var crashed atomic.Bool
	var cmu sync.Mutex
	var at time.Time
	crashedAt := func() time.Time {
		cmu.Lock()
		defer cmu.Unlock()
		return at
	}
	setCrashed := func(when time.Time) {
		cmu.Lock()
		at = when
		cmu.Unlock()
		crashed.Store(true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for cl := range 3 {
		cli := f.client(t)
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(cl)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				in := histcheck.Input{Kind: histcheck.Kind(rng.IntN(3)), Key: keys[rng.IntN(len(keys))],
					Value: fmt.Sprintf("c%d-%d", cl, seq), Version: int64(rng.IntN(4))}
				opCtx, opCancel := context.WithTimeout(context.Background(), time.Second)
				call := time.Now()
				out, keep := clientOp(opCtx, cli, in)
				ret := time.Now()
				opCancel()
				if out.Ambiguous && out.Stopped && crashed.Load() && call.After(crashedAt()) {
					// Sent to the crashed member's front after the crash:
					// its member was closed, so it certainly did nothing.
					keep = false
				}
				if keep {
					record(cl, in, out, call, ret)
				}
			}
		}()
	}
	// Crash once traffic is under way.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(history) >= 30
	}, 20*time.Second, 5*time.Millisecond)
	victim := rand.New(rand.NewPCG(uint64(seed), 99)).IntN(3)
	f.c.Crash(victim)
	setCrashed(time.Now())
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	done := 0
	for _, op := range history {
		if op.Return != math.MaxInt64 {
			done++
		}
	}
	t.Logf("seed %d: crashed member %d; %d operations, %d completed", seed, victim, len(history), done)
	if done < 20 {
		t.Fatalf("too few operations completed (%d) to say anything (seed %d)", done, seed)
	}
	switch v, file := histcheck.Check(history, time.Minute, "etcdapi-linearizability"); v {
	case histcheck.NotLinearizable:
		t.Fatalf("seed %d: not linearizable (%s): %v", seed, file, histcheck.Failing(history, time.Minute))
	case histcheck.Undecided:
		t.Fatalf("seed %d: the checker ran out of time: too many open writes", seed)
	}
}

// opOut is an operation's output, and whether it failed with etcd's
// "server stopped".
type opOut struct {
	histcheck.Output
	Stopped bool
}

func failed(err error) opOut {
	return opOut{Output: histcheck.Output{Ambiguous: true, Err: err.Error()},
		Stopped: errors.Is(rpctypes.Error(err), rpctypes.ErrStopped)}
}

// clientOp runs in through cli; keep is false for a read that failed.
func clientOp(ctx context.Context, cli *clientv3.Client, in histcheck.Input) (opOut, bool) {
	switch in.Kind {
	case histcheck.Put:
		_, err := cli.Put(ctx, in.Key, in.Value)
		if err != nil {
			return failed(err), true
		}
		return opOut{}, true
	case histcheck.Get:
		g, err := cli.Get(ctx, in.Key)
		if err != nil {
			return opOut{}, false
		}
		if len(g.Kvs) == 0 {
			return opOut{}, true
		}
		return opOut{Output: histcheck.Output{Found: true, Value: string(g.Kvs[0].Value), Version: g.Kvs[0].Version}}, true
	}
	r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(in.Key), "=", in.Version)).
		Then(clientv3.OpPut(in.Key, in.Value)).Commit()
	if err != nil {
		return failed(err), true
	}
	return opOut{Output: histcheck.Output{OK: r.Succeeded}}, true
}
