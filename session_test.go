package coord_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

func TestSessionTTLBelowMinimumIsRefused(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	ctx := ctxT(t, 5*time.Second)
	n := c.Node(0)
	_, err := n.NewSession(ctx, coord.WithTTL(n.MinSessionTTL()-time.Millisecond))
	require.ErrorIs(t, err, coord.ErrInvalidTTL)
}

func TestSessionKeepsEphemeralKeysUntilClose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 10*time.Second)
		n := c.Node(1)
		s, err := n.NewSession(ctx, coord.WithTTL(time.Second))
		require.NoError(t, err)
		_, err = n.Put(ctx, "eph/a", []byte("1"), coord.Ephemeral(s))
		require.NoError(t, err)
		kv, err := n.Put(ctx, "eph/b", []byte("2"), coord.Ephemeral(s))
		require.NoError(t, err)

		w := c.Node(2).Watch(ctx, "eph/", coord.FromRev(kv.ModRev))
		// Several TTLs pass: keep-alives hold the session.
		deadline := time.Now().Add(3 * s.TTL())
		for time.Now().Before(deadline) {
			select {
			case <-s.Done():
				t.Fatalf("session ended while kept alive: %v", s.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		require.True(t, s.Until().After(time.Now()))
		require.NoError(t, s.Close(ctx))
		<-s.Done()
		require.ErrorIs(t, s.Err(), coord.ErrSessionClosed)
		ev1, ev2 := <-w.Events(), <-w.Events()
		require.Equal(t, coord.EventDelete, ev1.Type)
		require.Equal(t, coord.EventDelete, ev2.Type)
		require.Equal(t, ev1.Rev, ev2.Rev, "the session's keys go in one revision")
		_, err = n.Put(ctx, "eph/c", []byte("3"), coord.Ephemeral(s))
		require.ErrorIs(t, err, coord.ErrSessionClosed)
	})
}

func TestSessionSurvivesLeaderCrash(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		leader := c.LeaderIndex()
		holder := (leader + 1) % 3
		s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(time.Second))
		require.NoError(t, err)
		_, err = c.Node(holder).Put(ctx, "k", []byte("v"), coord.Ephemeral(s))
		require.NoError(t, err)
		c.Crash(leader)
		c.LeaderIndex()
		end := time.Now().Add(3 * s.TTL())
		for time.Now().Before(end) {
			select {
			case <-s.Done():
				t.Fatalf("session expired after a failover: %v", s.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		_, err = c.Node(holder).Get(ctx, "k")
		require.NoError(t, err)
	})
}

func TestDeadHolderSessionExpires(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		leader := c.LeaderIndex()
		holder := (leader + 1) % 3
		observer := (leader + 2) % 3
		s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(time.Second))
		require.NoError(t, err)
		kv, err := c.Node(holder).Put(ctx, "k", []byte("v"), coord.Ephemeral(s))
		require.NoError(t, err)
		w := c.Node(observer).Watch(ctx, "k", coord.FromRev(kv.ModRev))
		crashed := time.Now()
		c.Crash(holder)
		ev := <-w.Events()
		require.Equal(t, coord.EventDelete, ev.Type)
		elapsed := time.Since(crashed)
		t.Logf("expired %v after the holder died (TTL %v)", elapsed, s.TTL())
		require.Less(t, elapsed, 2*s.TTL()+2*time.Second)
	})
}

func TestIdleSessionsDoNotWriteTheLog(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// A leader marks a session silent in the log once a keep-alive is
		// later than half an election timeout past its interval (the safe
		// direction: a successor then grants less). coordtest's 200ms election
		// timeout makes that 100ms, which a loaded machine running -race
		// exceeds; a 1s election timeout keeps this test about idle sessions
		// rather than about the scheduler.
		c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(_ int, cfg *coord.Config) {
			cfg.TickInterval = 50 * time.Millisecond
		}))
		ctx := ctxT(t, 90*time.Second)
		const sessions = 1000
		// The TTL is generous: what this test measures is the log, and a
		// thousand creations at once on a loaded machine (with -race) can take
		// seconds to reach their holders. Keep-alives go out every TTL/4, so
		// the window below still spans several rounds of them.
		ttl := 8 * time.Second
		var all []*coord.Session
		errc := make(chan error, sessions)
		out := make(chan *coord.Session, sessions)
		for i := range sessions {
			go func() {
				s, err := c.Node(i%3).NewSession(ctx, coord.WithTTL(ttl))
				errc <- err
				out <- s
			}()
		}
		for range sessions {
			require.NoError(t, <-errc)
			all = append(all, <-out)
		}
		// Let keep-alives settle: every session confirmed once after creation
		// (which also flushes any Seen entry their first keep-alive needed).
		firsts := make([]time.Time, len(all))
		for i, s := range all {
			firsts[i] = s.Until()
		}
		// One deadline for all of them, so a fault shows as a failure with a
		// count, not as a run that waits a bound per session.
		unconfirmed := func() (n int) {
			for i, s := range all {
				if !s.Until().After(firsts[i]) {
					n++
				}
			}
			return n
		}
		deadline := time.Now().Add(30 * time.Second)
		for unconfirmed() > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling the sessions' deadlines, which move on each confirmation
		}
		require.Zero(t, unconfirmed(), "sessions never confirmed after their creation")
		require.Eventually(t, func() bool {
			st := c.Leader().Status()
			return st.Applied == st.LastIndex
		}, 10*time.Second, 10*time.Millisecond)
		leader := c.Leader()
		before := leader.Status()
		window := time.Now().Add(3 * ttl / 4) // three rounds of keep-alives (one every TTL/4)
		for time.Now().Before(window) {
			for _, s := range all {
				select {
				case <-s.Done():
					t.Fatalf("session %d ended while kept alive: %v", s.ID(), s.Err())
				default:
				}
			}
			time.Sleep(50 * time.Millisecond) // sampling the sessions' state over the window
		}
		after := leader.Status()
		require.Equal(t, before.LastIndex, after.LastIndex, "keep-alives of %d idle sessions wrote to the log", sessions)
		require.Equal(t, before.Term, after.Term)
	})
}

func TestSessionJeopardyThenExpiryWhenCutOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		leader := c.LeaderIndex()
		holder := (leader + 1) % 3
		s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(time.Second))
		require.NoError(t, err)
		select {
		case <-s.Healthy():
		default:
			t.Fatal("a new session is healthy")
		}
		c.Isolate(holder)
		cut := time.Now()
		select {
		case <-s.Jeopardy():
		case <-s.Done():
			t.Fatal("expired without passing through jeopardy")
		case <-ctx.Done():
			t.Fatal("never in jeopardy")
		}
		require.True(t, time.Now().Before(s.Until()), "jeopardy comes before the local deadline")
		<-s.Done()
		require.ErrorIs(t, s.Err(), coord.ErrSessionExpired)
		t.Logf("jeopardy then local expiry %v after the cut (TTL %v)", time.Since(cut), s.TTL())
	})
}

func TestSessionRecoversFromJeopardy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(i int, cfg *coord.Config) {}))
		ctx := ctxT(t, 20*time.Second)
		leader := c.LeaderIndex()
		holder := (leader + 1) % 3
		s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(2*time.Second))
		require.NoError(t, err)
		c.Isolate(holder)
		<-s.Jeopardy()
		c.Heal()
		select {
		case <-s.Healthy():
		case <-s.Done():
			t.Fatalf("expired instead of recovering: %v", s.Err())
		}
		require.NoError(t, s.Err())
	})
}

func TestLeaderFlappingCannotKeepADeadSessionAlive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 5)
		ctx := ctxT(t, 30*time.Second)
		ttl := time.Second
		leader := c.LeaderIndex()
		holder := (leader + 1) % 5
		s, err := c.Node(holder).NewSession(ctx, coord.WithTTL(ttl))
		require.NoError(t, err)
		kv, err := c.Node(holder).Put(ctx, "held", []byte("x"), coord.Ephemeral(s))
		require.NoError(t, err)
		c.Crash(holder)
		died := time.Now()
		var observer *coord.Node
		for i := range 5 {
			if i != holder {
				observer = c.Node(i)
				break
			}
		}
		w := observer.Watch(ctx, "held", coord.FromRev(kv.ModRev))
		// Depose every leader soon after it is elected: every term is shorter
		// than the TTL, so granting each session a full TTL per new leader
		// (what etcd does with leases) would keep it alive forever.
		et := 200 * time.Millisecond
		flaps := 0
		for {
			select {
			case ev := <-w.Events():
				require.Equal(t, coord.EventDelete, ev.Type)
				elapsed := time.Since(died)
				t.Logf("dead session expired %v after its holder died, through %d leader changes", elapsed, flaps)
				require.Less(t, elapsed, 2*ttl+4*et+time.Second, "bound: 2xTTL + 4x election timeout (+ test slack)")
				return
			case <-ctx.Done():
				t.Fatalf("the dead session outlived %d leader changes", flaps)
			default:
			}
			l := c.LeaderIndex()
			select {
			case <-time.After(3 * et): // the term's length
			case <-ctx.Done():
			}
			c.Isolate(l)
			flaps++
			for c.LeaderIndex() == l {
				time.Sleep(et / 20) // polling Status for the next leader; in a bubble a bare spin stops the clock
			}
			c.Heal()
		}
	})
}

// TestEphemeralPutOnClosedSession: a write naming a session its holder
// closed says so (ErrSessionClosed, as Lock on it does), on a member and
// on a client, and writes nothing.
func TestEphemeralPutOnClosedSession(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 1)
	ctx := ctxT(t, 20*time.Second)
	n := c.Node(0)
	cl := connect(t, c)
	for name, cell := range map[string]coord.Cell{"member": n, "client": cl} {
		s, err := cell.NewSession(ctx, coord.WithTTL(n.MinSessionTTL()))
		require.NoError(t, err, name)
		require.NoError(t, s.Close(ctx), name)
		_, err = cell.Put(ctx, "closed/"+name, []byte("x"), coord.Ephemeral(s))
		require.ErrorIs(t, err, coord.ErrSessionClosed, name)
		_, err = n.Get(ctx, "closed/"+name)
		require.ErrorIs(t, err, coord.ErrNotFound, name)
	}
}
