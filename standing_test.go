package coord_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/transport"
	"github.com/stretchr/testify/require"
)

// Members and clients that know where they stand: a removed member stops
// with ErrRemoved, a joiner is ready only once caught up, and a client
// leaves a member that cannot serve in time for its sessions.

// infoLines returns the INFO lines of member's logs whose message holds msg.
func infoLines(logs *lockedBuffer, member, msg string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=INFO") && strings.Contains(l, "member="+member+" ") && strings.Contains(l, msg) {
			out = append(out, l)
		}
	}
	return out
}

// requireRemoved checks that n stopped because it was removed: Done
// closed, Err, Ready and requests say ErrRemoved, /readyz and /healthz
// answer 503, and one INFO line says so.
func requireRemoved(t *testing.T, c *coordtest.Cluster, n *coord.Node, logs *lockedBuffer) {
	t.Helper()
	select {
	case <-n.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the removed member kept running: Err %v (seed %d)", n.Err(), c.Seed())
	}
	require.ErrorIs(t, n.Err(), coord.ErrRemoved, "seed %d", c.Seed())
	ctx := ctxT(t, 10*time.Second)
	require.ErrorIs(t, n.Ready(ctx), coord.ErrRemoved)
	_, err := n.Put(ctx, "after-removal", []byte("x"))
	require.ErrorIs(t, err, coord.ErrClosed)
	require.ErrorIs(t, err, coord.ErrRemoved)
	h := n.Handler()
	code, body := get(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "removed")
	code, _ = get(t, h, "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	name := n.Status().Name
	require.Eventually(t, func() bool { return len(infoLines(logs, name, `msg="removed from the cell; stopping"`)) > 0 },
		10*time.Second, 10*time.Millisecond, "the INFO line")
	require.Len(t, infoLines(logs, name, `msg="removed from the cell; stopping"`), 1, "one INFO line")
}

// TestRemovedMemberStops: a follower removed while connected learns it
// from the log (its own removal applies there) and stops.
func TestRemovedMemberStops(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	c := coordtest.NewCluster(t, 3, coordtest.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ctx := ctxT(t, 60*time.Second)
	li := c.LeaderIndex()
	victim := (li + 1) % 3
	n := c.Node(victim)
	require.NoError(t, n.Ready(ctx))
	code, _ := get(t, n.Handler(), "/readyz")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, c.Node(li).Admin().RemoveMember(ctx, c.Name(victim)))
	requireRemoved(t, c, n, logs)
	_, err := c.Node(li).Put(ctx, "k", []byte("v"))
	require.NoError(t, err, "the two others carry on")
}

// TestRemovedLeaderStops: RemoveMember on the leader of its own name
// returns once the change applied; the old leader then stops, and the
// others elect a new one.
func TestRemovedLeaderStops(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	c := coordtest.NewCluster(t, 3, coordtest.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ctx := ctxT(t, 60*time.Second)
	li := c.LeaderIndex()
	n := c.Node(li)
	require.NoError(t, n.Admin().RemoveMember(ctx, c.Name(li)))
	requireRemoved(t, c, n, logs)
	other := c.Node((li + 1) % 3)
	require.Eventually(t, func() bool {
		_, err := other.Put(ctx, "k", []byte("v"))
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "a write after the leader left (seed %d)", c.Seed())
}

// TestMemberRemovedWhileCutOffStops: a member removed while it could not
// hear the cell never sees its removal in its log; once it can reach the
// others again, they tell it, and it stops. A learner, which never
// campaigns, learns it the same way.
func TestMemberRemovedWhileCutOffStops(t *testing.T) {
	t.Parallel()
	for _, learner := range []bool{false, true} {
		t.Run(fmt.Sprintf("learner=%v", learner), func(t *testing.T) {
			logs := &lockedBuffer{}
			c := coordtest.NewCluster(t, 3, coordtest.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
			ctx := ctxT(t, 90*time.Second)
			li := c.LeaderIndex()
			victim := (li + 1) % 3
			if learner {
				require.NoError(t, c.Node(li).Admin().AddLearner(ctx, "l", "l"))
				victim = c.Join("l")
			}
			n := c.Node(victim)
			require.NoError(t, n.Ready(ctx), "seed %d", c.Seed())
			c.Isolate(victim)
			// The others remove it while it hears nothing.
			for {
				li = c.LeaderIndex()
				if li != victim {
					break
				}
				time.Sleep(10 * time.Millisecond) // the isolated old leader steps down; no event to wait on
			}
			require.NoError(t, c.Node(li).Admin().RemoveMember(ctx, c.Name(victim)), "seed %d", c.Seed())
			select {
			case <-n.Done():
				t.Fatalf("stopped while cut off: %v (seed %d)", n.Err(), c.Seed())
			default:
			}
			c.Heal()
			requireRemoved(t, c, n, logs)
		})
	}
}

// TestJoinerReadyMeansCaughtUp: a learner started with Join is ready only
// once it has applied the commit index the cell had when it joined (by a
// snapshot here: the log was compacted), and its first write succeeds.
func TestJoinerReadyMeansCaughtUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := coordtest.NewCluster(t, 3, coordtest.WithConfig(func(i int, cfg *coord.Config) {
			cfg.CompactEvery = 50
			cfg.CatchUpEntries = 10
		}))
		ctx := ctxT(t, 60*time.Second)
		leader := c.Leader()
		for i := range 300 {
			_, err := leader.Put(ctx, fmt.Sprintf("k/%03d", i), []byte(strings.Repeat("v", 512)))
			require.NoError(t, err)
		}
		require.NoError(t, leader.Admin().AddLearner(ctx, "joiner", "joiner"))
		commit := leader.Status().Commit
		j := c.Node(c.Join("joiner"))
		require.NoError(t, j.Ready(ctx), "seed %d", c.Seed())
		st := j.Status()
		require.GreaterOrEqual(t, st.Applied, commit, "ready before it caught up (seed %d)", c.Seed())
		kvs, _, err := j.List(ctx, "k/", coord.Serializable())
		require.NoError(t, err)
		require.Len(t, kvs, 300)
		_, err = j.Put(ctx, "first-write", []byte("x"))
		require.NoError(t, err, "the joiner's first write after Ready (seed %d)", c.Seed())
	})
}

// sessionsOnClient creates n sessions of the cell's minimum TTL on cl and
// waits until each has had a keep-alive confirmed.
func sessionsOnClient(t *testing.T, c *coordtest.Cluster, cl *coord.Client, n int) []*coord.Session {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	var out []*coord.Session
	for range n {
		s, err := cl.NewSession(ctx, coord.WithTTL(cl.MinSessionTTL()))
		require.NoError(t, err, "seed %d", c.Seed())
		out = append(out, s)
	}
	for _, s := range out {
		u := s.Until()
		require.Eventually(t, func() bool { return s.Until().After(u) }, 20*time.Second, 5*time.Millisecond,
			"a keep-alive confirmed (seed %d)", c.Seed())
	}
	return out
}

// clientSurvivesOutage cuts the client's member off as fault says, for
// two TTLs, and checks that every session of minimum TTL survived: the
// client moved to a member that can serve in time.
//
// It runs in virtual time (a synctest bubble): the minimum TTL is 800 ms,
// which a loaded machine's scheduler, not the client, could otherwise
// outlast.
func clientSurvivesOutage(t *testing.T, fault func(c *coordtest.Cluster, i int), heal func(c *coordtest.Cluster, i int)) {
	synctest.Test(t, func(t *testing.T) { clientSurvivesOutageIn(t, fault, heal) })
}

func clientSurvivesOutageIn(t *testing.T, fault func(c *coordtest.Cluster, i int), heal func(c *coordtest.Cluster, i int)) {
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c)
	held := sessionsOnClient(t, c, cl, 6)
	victim := memberIndex(c, cl.Member())
	ttl := cl.MinSessionTTL()
	t.Logf("cutting off %s, the client's member; sessions of TTL %v", c.Name(victim), ttl)
	fault(c, victim)
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		time.Sleep(ttl / 10) // the sessions must live through a fixed span: sampling it is the point
		for _, s := range held {
			if err := s.Err(); err != nil {
				t.Fatalf("session %d ended while its member was cut off: %v; client on %q (seed %d)",
					s.ID(), err, cl.Member(), c.Seed())
			}
		}
	}
	require.NotEqual(t, c.Name(victim), cl.Member(), "the client stayed on the member that cannot serve (seed %d)", c.Seed())
	heal(c, victim)
	ctx := ctxT(t, 30*time.Second)
	_, err := cl.Put(ctx, "after", []byte("x"))
	require.NoError(t, err)
	for _, s := range held {
		require.NoError(t, s.Err(), "seed %d", c.Seed())
		require.NoError(t, s.Close(ctx))
	}
}

// TestClientLeavesIsolatedMember: a client's member is alive and answers
// the client, but cannot reach the cell; the client moves to another
// member soon enough that sessions of the minimum TTL survive.
func TestClientLeavesIsolatedMember(t *testing.T) {
	t.Parallel()
	clientSurvivesOutage(t, (*coordtest.Cluster).Isolate, func(c *coordtest.Cluster, _ int) { c.Heal() })
}

// TestClientLeavesPausedMember: the same with a member frozen (a long GC
// pause, SIGSTOP of its Raft side).
func TestClientLeavesPausedMember(t *testing.T) {
	t.Parallel()
	clientSurvivesOutage(t, (*coordtest.Cluster).Pause, (*coordtest.Cluster).Resume)
}

// TestClientLearnsEveryMemberWithoutGossip: on a cell of static Peers, a
// client given one member learns every other member's client address
// (replicated in the address book), and Members reports them.
func TestClientLearnsEveryMemberWithoutGossip(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 3)
	c.Leader()
	cl := connect(t, c, func(cfg *coord.ClientConfig) { cfg.Members = []string{c.Name(0)} })
	ctx := ctxT(t, 60*time.Second)
	want := []string{c.Name(1), c.Name(2)}
	require.Eventually(t, func() bool {
		got := cl.Learned()
		return len(got) == 2 && slicesHaveSame(got, want)
	}, 30*time.Second, 20*time.Millisecond, "learned %q (seed %d)", cl.Learned(), c.Seed())
	ms, err := c.Node(1).Admin().Members(ctx)
	require.NoError(t, err)
	for _, m := range ms {
		require.Equal(t, m.Name, m.ClientAddr, "member %s's client address", m.Name)
	}
	// With its only configured member gone, the client carries on.
	s, err := cl.NewSession(ctx)
	require.NoError(t, err)
	c.Crash(0)
	require.Eventually(t, func() bool {
		_, err := cl.Put(ctx, "k", []byte("v"))
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "a write through a learned member (seed %d)", c.Seed())
	require.NoError(t, s.Err())
}

func slicesHaveSame(a, b []string) bool {
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
	}
	for _, v := range seen {
		if v != 0 {
			return false
		}
	}
	return true
}

// cuttable is a TCP transport that can be cut off from everyone, in both
// directions, without closing a connection: a partition as TCP sees one.
type cuttable struct {
	*transport.TCP
	cut  atomic.Bool
	out  chan transport.Envelope
	done chan struct{}
}

func newCuttable(t *testing.T, cfg transport.TCPConfig) *cuttable {
	tcp, err := transport.ListenTCP(cfg)
	require.NoError(t, err)
	c := &cuttable{TCP: tcp, out: make(chan transport.Envelope, 1024), done: make(chan struct{})}
	go func() {
		defer close(c.out)
		for env := range tcp.Receive() {
			if c.cut.Load() {
				continue
			}
			select {
			case c.out <- env:
			case <-c.done:
				return
			}
		}
	}()
	return c
}

func (c *cuttable) Send(envs []transport.Envelope) error {
	if c.cut.Load() {
		return nil
	}
	return c.TCP.Send(envs)
}

func (c *cuttable) Receive() <-chan transport.Envelope { return c.out }

func (c *cuttable) Close() error {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	return c.TCP.Close()
}

// TestMemberRemovedWhileCutOffOverTCP: over TCP, whose transport refuses
// a peer it was told to remove, a member removed while cut off is still
// told once it reaches the others, and stops with ErrRemoved.
func TestMemberRemovedWhileCutOffOverTCP(t *testing.T) {
	t.Parallel()
	var peers []coord.Peer
	addrs := map[string]string{}
	for i, addr := range loopbackAddrs(t, 3) {
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: addr})
		addrs[peers[i].Name] = addr
	}
	nodes := make([]*coord.Node, 3)
	trs := make([]*cuttable, 3)
	for i, p := range peers {
		trs[i] = newCuttable(t, transport.TCPConfig{Name: p.Name, Addr: p.Addr, Peers: addrs})
		n, err := coord.Open(context.Background(), coord.Config{
			Name: p.Name, Addr: p.Addr, Peers: peers, Transport: trs[i],
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
		})
		require.NoError(t, err)
		nodes[i] = n
	}
	t.Cleanup(func() {
		for i, n := range nodes {
			n.Close()
			trs[i].Close()
		}
	})
	ctx := ctxT(t, 60*time.Second)
	_, err := nodes[0].Put(ctx, "warmup", []byte("x"))
	require.NoError(t, err)
	leaderOf := func() int {
		for {
			for i, n := range nodes {
				if n.Status().Role == coord.RoleLeader {
					return i
				}
			}
			time.Sleep(10 * time.Millisecond) // polling Status: no event to wait on
		}
	}
	victim := (leaderOf() + 1) % 3
	require.NoError(t, nodes[victim].Ready(ctx))
	trs[victim].cut.Store(true)
	var li int
	for li = leaderOf(); li == victim; li = leaderOf() {
		time.Sleep(10 * time.Millisecond) // the cut-off leader steps down; no event to wait on
	}
	require.NoError(t, nodes[li].Admin().RemoveMember(ctx, peers[victim].Name))
	trs[victim].cut.Store(false)
	select {
	case <-nodes[victim].Done():
	case <-ctx.Done():
		t.Fatal("the removed member kept running")
	}
	require.ErrorIs(t, nodes[victim].Err(), coord.ErrRemoved)
	_, err = nodes[li].Put(ctx, "after", []byte("y"))
	require.NoError(t, err)
}
