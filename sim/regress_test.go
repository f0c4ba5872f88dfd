package sim

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
)

// TestWatchLeavesAMemberOnAFailedDisk: a client's watch on a member
// whose disk fails moves to another member. The member stops on the
// fault but, until it ends its client connections, takes each new
// watch and ends it at once as closed; the client resumed there at
// once, spinning, which in virtual time stopped the clock for good (seed
// 3000 of the first histories with disk faults).
func TestWatchLeavesAMemberOnAFailedDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithSeed(3000), coordtest.WithClients(), coordtest.WithWaitTimeout(settleBound),
			coordtest.WithConfig(func(_ int, cfg *coord.Config) {
				cfg.TickInterval, cfg.ElectionTicks, cfg.HeartbeatTicks = tick, electionTicks, heartbeatTicks
			}))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.Leader()
		cl, err := c.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := cl.Watch(ctx, "k/")
		put := func(via *coord.Node, k string) {
			t.Helper()
			if _, err := via.Put(ctx, k, []byte("v")); err != nil {
				t.Fatalf("put %s through %s: %v", k, via.Status().Name, err)
			}
		}
		next := func(want string) {
			t.Helper()
			select {
			case ev := <-w.Events():
				if ev.KV.Key != want {
					t.Fatalf("watch delivered %s, want %s", ev.KV.Key, want)
				}
			case <-time.After(settleBound):
				t.Fatalf("the watch delivered nothing within %v (its error: %v)", settleBound, w.Err())
			}
		}
		put(c.Leader(), "k/0")
		next("k/0")
		names := []string{c.Name(0), c.Name(1), c.Name(2)}
		i := slices.Index(names, cl.Member())
		if i < 0 {
			t.Fatalf("client on %q, not a member", cl.Member())
		}
		c.FailDisk(i, syscall.EIO)
		other := c.Node((i + 1) % 3)
		for k := 1; k <= 3; k++ { // the first reaches member i too, which stops at its append
			put(other, fmt.Sprintf("k/%d", k))
			next(fmt.Sprintf("k/%d", k))
		}
		c.FailDisk(i, nil)
	})
}
