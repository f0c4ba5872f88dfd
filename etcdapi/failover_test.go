package etcdapi

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// keeper returns the index of the front whose lease table keeps id alive
// on a client's keep-alives (heard within the last TTL/3), -1 if none.
func keeper(servers []*server, id int64) int {
	for i, s := range servers {
		s.leases.mu.Lock()
		e := s.leases.m[id]
		s.leases.mu.Unlock()
		if e == nil || !e.mu.TryLock() {
			continue
		}
		ok := e.kept && time.Since(e.heard) < time.Duration(e.ttl)*time.Second/3
		e.mu.Unlock()
		if ok {
			return i
		}
	}
	return -1
}

// TestLeaseSurvivesMemberCrash: a clientv3 session over all three
// members keeps its lease through the crash of the member whose front
// holds its keep-alive stream: the client moves to another front, which
// takes the session over.
func TestLeaseSurvivesMemberCrash(t *testing.T) {
	var mu sync.Mutex
	var servers []*server
	testServeHook = func(s *server) {
		mu.Lock()
		defer mu.Unlock()
		servers = append(servers, s)
	}
	defer func() { testServeHook = nil }()
	f := newFront(t, nil)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(servers) == f.c.Size()
	}, 20*time.Second, 10*time.Millisecond)
	mu.Lock()
	byNode := make([]*server, len(servers))
	for _, s := range servers {
		for i := range f.c.Size() {
			if s.node == f.c.Node(i) {
				byNode[i] = s
			}
		}
	}
	mu.Unlock()
	cli := f.client(t)
	ctx := tctx(t)
	// clientv3 gives a lease up when no keep-alive is answered within its
	// TTL; the move to another front (gRPC's reconnect, the takeover's
	// commit, an election if the leader crashed) must fit in it even on
	// a busy machine: with 2 s it did not beside two CPU burners (1 in 6).
	const ttl = 4
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	require.NoError(t, err)
	defer s.Close()
	_, err = cli.Put(ctx, "held", "v", clientv3.WithLease(s.Lease()))
	require.NoError(t, err)
	victim := -1
	require.Eventually(t, func() bool {
		victim = keeper(byNode, int64(s.Lease()))
		return victim >= 0
	}, 20*time.Second, 10*time.Millisecond)
	f.c.Crash(victim)
	t.Logf("crashed member %d, which kept the lease (seed %d)", victim, f.c.Seed())
	until := time.Now().Add(2 * ttl * time.Second)
	for time.Now().Before(until) {
		select {
		case <-s.Done():
			t.Fatalf("session ended after member %d crashed (seed %d)", victim, f.c.Seed())
		case <-time.After(100 * time.Millisecond):
		}
	}
	g, err := cli.Get(ctx, "held")
	require.NoError(t, err)
	require.Len(t, g.Kvs, 1, "the lease's key outlived 2 TTLs after member %d crashed", victim)
	require.NotEqual(t, -1, keeper(byNode, int64(s.Lease())), "another front keeps it")
}

// TestRequestTimeout: a write through a member cut off from the others
// ends by the front's request timeout with an etcd error the client
// understands, rather than holding its call while the client waits.
func TestRequestTimeout(t *testing.T) {
	f := newFront(t, nil, WithRequestTimeout(300*time.Millisecond))
	cli := f.client(t, f.eps[0])
	ctx := tctx(t)
	_, err := cli.Put(ctx, "before", "v")
	require.NoError(t, err)
	f.c.Isolate(0)
	defer f.c.Heal()
	start := time.Now()
	_, err = cli.Put(ctx, "cut", "v")
	require.Error(t, err)
	t.Logf("write through an isolated member: %v after %v", err, time.Since(start))
	require.Less(t, time.Since(start), 15*time.Second, "ended by the front, not the client's 30s")
}
