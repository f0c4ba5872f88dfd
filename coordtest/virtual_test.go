package coordtest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
)

// A service's election test in virtual time: the elected replica's
// member crashes, its session expires after its TTL, and the other
// replica takes over, all without waiting on the wall clock.
func TestElectionFailoverInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		c.Leader()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		first := c.Node(c.LeaderIndex())
		other := c.Node((c.LeaderIndex() + 1) % 3)
		s1, err := first.NewSession(ctx, coord.WithTTL(first.MinSessionTTL()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := coord.NewElection(s1, "svc").Campaign(ctx, "replica-1"); err != nil {
			t.Fatal(err)
		}
		s2, err := other.NewSession(ctx, coord.WithTTL(other.MinSessionTTL()))
		if err != nil {
			t.Fatal(err)
		}
		won := make(chan error, 1)
		go func() {
			_, err := coord.NewElection(s2, "svc").Campaign(ctx, "replica-2")
			won <- err
		}()
		start := time.Now()
		c.Crash(c.LeaderIndex()) // the first replica's member, leading the cell too
		if err := <-won; err != nil {
			t.Fatalf("second replica's campaign: %v", err)
		}
		took := time.Since(start)
		// The first replica's session had to expire: at least its TTL, in
		// virtual time, however fast the machine ran it.
		if took < s1.TTL() {
			t.Fatalf("the second replica won %v after the crash, before the first's TTL of %v", took, s1.TTL())
		}
		l, err := coord.NewElection(s2, "svc").Leader(ctx)
		if err != nil || string(l.Value) != "replica-2" {
			t.Fatalf("leader %+v, %v; want replica-2", l, err)
		}
	})
}
