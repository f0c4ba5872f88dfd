package coord_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/transport"
)

// startCell opens a three-member cell in this process, on an in-memory
// network, and returns its members and a function that closes them.
func startCell() ([]*coord.Node, func()) {
	net := transport.NewNetwork(1)
	names := []string{"a", "b", "c"}
	var peers []coord.Peer
	for _, name := range names {
		peers = append(peers, coord.Peer{Name: name, Addr: name})
	}
	var nodes []*coord.Node
	for _, name := range names {
		n, err := coord.Open(context.Background(), coord.Config{
			Name:           name,
			Peers:          peers,
			Transport:      net.Join(name),
			TickInterval:   10 * time.Millisecond,
			ElectionTicks:  20,
			HeartbeatTicks: 2,
		})
		if err != nil {
			log.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return nodes, func() {
		for _, n := range nodes {
			n.Close()
		}
		net.Close()
	}
}

func ExampleMutex() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Two processes (here: two members) want the same lock.
	s1, err := nodes[0].NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s1.Close(ctx)
	s2, err := nodes[1].NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close(ctx)

	m1 := coord.NewMutex(s1, "jobs")
	token, err := m1.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first holder has a token:", token > 0)

	m2 := coord.NewMutex(s2, "jobs")
	_, err = m2.TryLock(ctx)
	fmt.Println("second holder, TryLock:", errors.Is(err, coord.ErrLocked))

	// Done is closed when the hold ends for any reason (Unlock, the
	// session's expiry, the key deleted): stop writing then.
	if err := m1.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	<-m1.Done()
	next, err := m2.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second holder's token is greater:", next > token)
	if err := m2.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// first holder has a token: true
	// second holder, TryLock: true
	// second holder's token is greater: true
}

func ExampleElection() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s1, err := nodes[0].NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s1.Close(ctx)
	s2, err := nodes[1].NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close(ctx)

	// A third member watches the leadership.
	watcher, err := nodes[2].NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer watcher.Close(ctx)
	octx, stopObserving := context.WithCancel(ctx)
	leaders := coord.NewElection(watcher, "scheduler").Observe(octx)
	show := func() {
		l := <-leaders
		if l.Vacant {
			fmt.Println("observed: no leader")
			return
		}
		fmt.Println("observed leader:", l.Value)
	}
	show()

	e1 := coord.NewElection(s1, "scheduler")
	if _, err := e1.Campaign(ctx, "replica-1"); err != nil {
		log.Fatal(err)
	}
	show()

	e2 := coord.NewElection(s2, "scheduler")
	ok, _, err := e2.TryCampaign(ctx, "replica-2")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replica-2 leads at once:", ok)

	// replica-1 steps down (its session ending, or its member crashing,
	// would do the same); replica-2's Campaign then leads.
	if err := e1.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	show()
	token, err := e2.Campaign(ctx, "replica-2")
	if err != nil {
		log.Fatal(err)
	}
	show()
	fmt.Println("replica-2 has a token:", token > 0)
	stopObserving()
	for range leaders {
	}
	// Output:
	// observed: no leader
	// observed leader: replica-1
	// replica-2 leads at once: false
	// observed: no leader
	// observed leader: replica-2
	// replica-2 has a token: true
}

func ExampleNode_Acquire() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	lease, err := nodes[0].Acquire(ctx, "nightly-report", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leased:", lease.Token > 0, "until later:", lease.Until.After(time.Now()))

	// Someone else waits at most 100ms, while the lease is held.
	wait, cancelWait := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = nodes[1].Acquire(wait, "nightly-report", 2*time.Second)
	cancelWait()
	fmt.Println("second Acquire timed out:", errors.Is(err, coord.ErrTimeout))

	// Keep the lease while working; give it back when done.
	if _, err := lease.Renew(ctx); err != nil {
		log.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	next, err := nodes[1].Acquire(ctx, "nightly-report", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next token is greater:", next.Token > lease.Token)
	if err := next.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// leased: true until later: true
	// second Acquire timed out: true
	// next token is greater: true
}
