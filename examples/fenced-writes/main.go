// Command fenced-writes shows why a lock is not enough and what fencing
// tokens add.
//
// Three scheduler replicas run in this process, each a member of an
// in-memory coord cell. They elect a leader, which writes job results to
// a storage service. The storage service checks the fencing token of each
// write with a coord.Fence. Then the leader is paused (a long GC pause,
// simulated by cutting its member off) for longer than its session TTL:
// the cell expires its session, another replica becomes leader with a
// greater token and writes on. When the old leader wakes up it still
// believes it leads and writes with its old token: the storage service
// refuses the write.
//
//	go run ./examples/fenced-writes
//
// It exits non-zero if the storage ever accepted a stale write.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/transport"
)

// storageService is the resource the leader writes to. It knows nothing
// of elections; it only checks tokens.
type storageService struct {
	fence *coord.Fence
	mu    sync.Mutex
	jobs  []string
	stale bool // a write with a token below the highest seen was accepted
	high  coord.Token
}

func (s *storageService) write(ctx context.Context, who string, token coord.Token, job string) error {
	return s.fence.Do(ctx, "jobs", token, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if token < s.high {
			s.stale = true
		}
		s.high = max(s.high, token)
		s.jobs = append(s.jobs, fmt.Sprintf("%s by %s (token %d)", job, who, token))
		return nil
	})
}

type replica struct {
	name    string
	node    *coord.Node
	session *coord.Session
	token   coord.Token
}

// campaign runs for leadership until it wins, starting a new session
// whenever the one it campaigns with has ended.
func (r *replica) campaign(ctx context.Context, ttl time.Duration, won chan<- *replica) {
	for ctx.Err() == nil {
		if r.session.Err() != nil {
			s, err := r.node.NewSession(ctx, coord.WithTTL(ttl))
			if err != nil {
				continue
			}
			r.session = s
		}
		token, err := coord.NewElection(r.session, "scheduler").Campaign(ctx, r.name)
		if err == nil {
			r.token = token
			won <- r
			return
		}
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fenced-writes:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	net := transport.NewNetwork(1)
	defer net.Close()
	names := []string{"scheduler-a", "scheduler-b", "scheduler-c"}
	var peers []coord.Peer
	for _, n := range names {
		peers = append(peers, coord.Peer{Name: n, Addr: n})
	}
	var replicas []*replica
	for _, name := range names {
		node, err := coord.Open(ctx, coord.Config{
			Name: name, Peers: peers, Transport: net.Join(name),
			// Fast timing so the story takes seconds: 10ms ticks, a 200ms
			// election timeout.
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
		})
		if err != nil {
			return err
		}
		defer node.Close()
		replicas = append(replicas, &replica{name: name, node: node})
	}
	const ttl = time.Second
	for _, r := range replicas {
		s, err := r.node.NewSession(ctx, coord.WithTTL(ttl))
		if err != nil {
			return err
		}
		r.session = s
	}
	store := &storageService{fence: coord.NewFence(nil)}

	// Everyone campaigns; the first to win leads. A replica whose session
	// ends before it wins (on a loaded machine even a follower's can)
	// starts a new one and campaigns again, as a real service would.
	won := make(chan *replica, len(replicas))
	var campaigns sync.WaitGroup
	defer campaigns.Wait()
	defer cancel()
	for _, r := range replicas {
		campaigns.Go(func() { r.campaign(ctx, ttl, won) })
	}
	elected := func() (*replica, error) {
		select {
		case r := <-won:
			return r, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("no replica was elected: %w", ctx.Err())
		}
	}
	old, err := elected()
	if err != nil {
		return err
	}
	fmt.Printf("%s is elected leader with fencing token %d\n", old.name, old.token)
	if err := store.write(ctx, old.name, old.token, "job-1"); err != nil {
		return err
	}
	fmt.Printf("%s writes job-1 with token %d: accepted\n", old.name, old.token)

	fmt.Printf("%s pauses (a long GC pause) for longer than its %v session TTL...\n", old.name, ttl)
	net.Isolate(old.name)
	next, err := elected()
	if err != nil {
		return err
	}
	fmt.Printf("the cell expired %s's session; %s is elected leader with token %d\n", old.name, next.name, next.token)
	if err := store.write(ctx, next.name, next.token, "job-2"); err != nil {
		return err
	}
	fmt.Printf("%s writes job-2 with token %d: accepted\n", next.name, next.token)

	net.Heal()
	fmt.Printf("%s wakes up, still believing it leads, and writes job-3 with token %d\n", old.name, old.token)
	err = store.write(ctx, old.name, old.token, "job-3")
	switch {
	case errors.Is(err, coord.ErrStaleToken):
		fmt.Printf("the storage service refuses it: %v\n", err)
	case err != nil:
		return err
	default:
		fmt.Println("the storage service ACCEPTED the stale write")
	}
	fmt.Println("jobs stored:")
	store.mu.Lock()
	defer store.mu.Unlock()
	for _, j := range store.jobs {
		fmt.Println("  " + j)
	}
	if store.stale || err == nil {
		return errors.New("a stale write was accepted")
	}
	fmt.Println("no stale write was accepted")
	return nil
}
