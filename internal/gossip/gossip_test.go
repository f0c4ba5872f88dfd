package gossip

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coordcell/coord/internal/testmain"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func fastConfig(name string, tr *MemNetwork, seeds []string, meta Meta) (Config, string) {
	t, addr := tr.Endpoint(name)
	return Config{
		Name: name, Transport: t, Seeds: seeds, Meta: meta,
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond,
		SuspicionMult: 2, GossipInterval: 20 * time.Millisecond, PushPullInterval: time.Second,
	}, addr
}

// waitFor polls cond on every gossip change, failing after a generous
// deadline.
func waitFor(t *testing.T, g *Gossip, what string, cond func([]Member) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		ch := g.Changed()
		if cond(g.Members()) {
			return
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond): // states also age
		case <-deadline:
			t.Fatalf("timed out waiting for %s; members %+v", what, g.Members())
		}
	}
}

func count(ms []Member, st State) int {
	n := 0
	for _, m := range ms {
		if m.State == st {
			n++
		}
	}
	return n
}

// TestMemNetworkGossip runs in virtual time: memberlist's probes,
// suspicion and leave broadcasts all run on timers, so a starved machine
// used to fail live members before they could leave.
func TestMemNetworkGossip(t *testing.T) { synctest.Test(t, testMemNetworkGossip) }

func testMemNetworkGossip(t *testing.T) {
	net := NewMemNetwork()
	var gs []*Gossip
	var seed string
	for i := range 5 {
		cfg, addr := fastConfig(fmt.Sprintf("m%d", i), net, []string{seed}, Meta{ID: uint64(i + 1), Addr: fmt.Sprintf("raft%d", i), Zone: "z"})
		// More patient suspicion than fastConfig's: this test tells a
		// leave from a failure, and on a starved machine live members
		// were failed before they could leave (memberlist then keeps them
		// failed). The probe interval stays: a probe running at Close
		// outlives it by up to one interval.
		cfg.ProbeTimeout, cfg.SuspicionMult = 80*time.Millisecond, 5
		if i == 0 {
			seed = addr
			cfg.Seeds = nil
		}
		g, err := Start(cfg)
		require.NoError(t, err)
		gs = append(gs, g)
	}
	defer func() {
		for _, g := range gs {
			g.Close()
		}
		// A probe running at Close outlives it by up to its timeout and
		// an interval (memberlist does not wait for it); the bubble must
		// see every goroutine end, so let virtual time run past them.
		time.Sleep(2 * time.Second)
	}()
	waitFor(t, gs[4], "all alive", func(ms []Member) bool { return count(ms, StateAlive) == 5 })
	ms := gs[4].Members()
	require.Equal(t, "raft2", ms[2].Meta.Addr, "metadata is gossiped")

	require.NoError(t, gs[1].SetMeta(Meta{ID: 2, Addr: "moved", Cell: 7}))
	waitFor(t, gs[3], "meta update", func(ms []Member) bool { return ms[1].Meta.Addr == "moved" && ms[1].Meta.Cell == 7 })

	// m0 must see m2 alive before it leaves: a member that m0 already
	// holds failed (probes missed on a starved machine) stays failed at a
	// leave of the same incarnation, which is memberlist's rule.
	waitFor(t, gs[0], "m2 alive", func(ms []Member) bool { return ms[2].State == StateAlive })
	require.NoError(t, gs[2].Leave(time.Second, 500*time.Millisecond))
	gs[2].Close()
	waitFor(t, gs[0], "m2 left", func(ms []Member) bool { return ms[2].State == StateLeft })

	gs[3].Close() // a crash: no leave
	waitFor(t, gs[0], "m3 failed", func(ms []Member) bool { return ms[3].State == StateFailed })

	net.Partition([]string{"m0", "m1"}, []string{"m4"})
	waitFor(t, gs[4], "m4 sees m0, m1 failed", func(ms []Member) bool {
		return ms[0].State == StateFailed && ms[1].State == StateFailed
	})
	net.Heal()
}

func TestKeysRequired(t *testing.T) {
	net := NewMemNetwork()
	key := make([]byte, 32)
	c0, seed := fastConfig("a", net, nil, Meta{})
	c0.Keys = [][]byte{key}
	a, err := Start(c0)
	require.NoError(t, err)
	defer a.Close()
	c1, _ := fastConfig("b", net, []string{seed}, Meta{})
	c1.Keys = [][]byte{key}
	b, err := Start(c1)
	require.NoError(t, err)
	defer b.Close()
	waitFor(t, a, "b joins with the key", func(ms []Member) bool { return count(ms, StateAlive) == 2 })

	c2, _ := fastConfig("c", net, []string{seed}, Meta{}) // no key
	c, err := Start(c2)
	require.NoError(t, err)
	defer c.Close()
	time.Sleep(500 * time.Millisecond) // proving a negative: give c time to (fail to) join
	require.Equal(t, 2, count(a.Members(), StateAlive), "a member without the key is not let in")
}

func TestMetaLimits(t *testing.T) {
	_, err := Meta{Zone: string(make([]byte, 600))}.Encode()
	require.ErrorIs(t, err, ErrMeta)
	_, err = DecodeMeta([]byte{9, 1, 2})
	require.ErrorIs(t, err, ErrMeta)
	m := Meta{Cell: 1, ID: 2, Incarnation: 3, Addr: "x:1", Zone: "a", NoVote: true, Expect: 3, Vote: 9}
	data, err := m.Encode()
	require.NoError(t, err)
	got, err := DecodeMeta(data)
	require.NoError(t, err)
	require.Equal(t, m, got)
}

// TestSuspect cuts a member off: a member whose probe of it goes
// unanswered sees it suspect before memberlist calls it failed, and alive
// again once the cut heals and a probe is answered.
func TestSuspect(t *testing.T) {
	net := NewMemNetwork()
	var gs []*Gossip
	var seed string
	for i := range 3 {
		cfg, addr := fastConfig(fmt.Sprintf("m%d", i), net, []string{seed}, Meta{ID: uint64(i + 1)})
		cfg.SuspicionMult = 20 // two seconds of suspicion: long enough to watch it
		if i == 0 {
			seed, cfg.Seeds = addr, nil
		}
		g, err := Start(cfg)
		require.NoError(t, err)
		gs = append(gs, g)
	}
	defer func() {
		for _, g := range gs {
			g.Close()
		}
	}()
	for _, g := range gs {
		waitFor(t, g, "all alive", func(ms []Member) bool { return count(ms, StateAlive) == 3 })
	}
	net.Partition([]string{"m0", "m1"}, []string{"m2"})
	// Either m0 or m1 probes m2 first; watch both on one deadline.
	suspecting := -1
	deadline := time.After(20 * time.Second)
	for suspecting < 0 {
		ch0, ch1 := gs[0].Changed(), gs[1].Changed()
		for i := range 2 {
			if gs[i].Members()[2].State == StateSuspect {
				suspecting = i
			}
		}
		if suspecting >= 0 {
			break
		}
		select {
		case <-ch0:
		case <-ch1:
		case <-deadline:
			t.Fatalf("no member suspected m2: %+v %+v", gs[0].Members(), gs[1].Members())
		}
	}
	net.Heal()
	waitFor(t, gs[suspecting], "m2 alive again", func(ms []Member) bool { return ms[2].State == StateAlive })
}
