package coord_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
)

// TestClientOutOfPhaseWritesNoMarks: a client whose keep-alives reach its
// member out of phase with the member's own batches (it connected in the
// middle of the member's interval) is still heard by the leader within
// the slack it gives a session, so keeping its sessions alive writes
// nothing to the log. The member used to hold such a keep-alive for half
// an interval before sending it early: the leader then found every one of
// the client's sessions silent each interval, and wrote a silence mark
// and a seen mark for each.
func TestClientOutOfPhaseWritesNoMarks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithClients(), coordtest.WithConfig(func(i int, cfg *coord.Config) {
			cfg.TickInterval, cfg.ElectionTicks, cfg.HeartbeatTicks = 100*time.Millisecond, 10, 1
		}))
		ctx := context.Background()
		ttl := 10 * time.Second
		// Every member has announced its client address (a conf change
		// each), so the window's log holds only what the sessions cost.
		for {
			ms, err := c.Node(0).Admin().Members(ctx)
			if err != nil {
				t.Fatal(err)
			}
			announced := 0
			for _, m := range ms {
				if m.ClientAddr != "" {
					announced++
				}
			}
			if announced == 3 {
				break
			}
			time.Sleep(100 * time.Millisecond) // virtual: polling Members, there is no event
		}
		// Each member's own session sets its batches' phase.
		for i := range 3 {
			if _, err := c.Node(i).NewSession(ctx, coord.WithTTL(ttl)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 6 {
			// Half an interval apart from the members' phase and each other.
			time.Sleep(ttl / 4 / 6)
			cl, err := c.Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				if _, err := cl.NewSession(ctx, coord.WithTTL(ttl)); err != nil {
					t.Fatalf("client %d: %v", i, err)
				}
			}
		}
		time.Sleep(ttl / 4) // the first keep-alives of the new sessions
		before := c.Leader().Status().Commit
		time.Sleep(8 * ttl / 4)
		if moved := c.Leader().Status().Commit - before; moved > 0 {
			t.Errorf("the log moved %d entries in 8 intervals while every session was kept alive (seed %d)", moved, c.Seed())
		}
	})
}
