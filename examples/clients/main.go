// Command clients shows processes that use a cell without being members
// of it: three members serve clients on their ClientAddr, and three
// workers connect as clients (coord.Connect), each with a credential of
// its own that the operator issued from the cell's client secret
// (coord.IssueClientCredential, or coordctl client issue): a worker
// proves its own name and no other, and neither secret leaves the
// members. The workers take turns holding one lock and
// write to a storage service that checks their fencing tokens. Midway,
// the member one worker talks to is closed: the worker moves to another
// member and carries on, its session and its place in the queue intact.
//
//	go run ./examples/clients
//
// It exits non-zero if a write was refused or a worker lost its session.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/coordcell/coord"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "clients:", err)
		os.Exit(1)
	}
}

// secret is the members' shared secret, clientSecret the one the
// operator issues client credentials from: no client holds either, so
// no client can pass for a member or for another client. A real cell
// reads both from a secret store, and its clients their credentials.
var (
	secret       = []byte("example secret, 32 bytes or more: keep it out of code")
	clientSecret = []byte("example client secret, 32 bytes or more, apart")
)

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "coord-clients-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	members, err := startMembers(ctx, dir)
	if err != nil {
		return err
	}
	defer func() {
		for _, m := range members {
			m.Close()
		}
	}()
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, m.Admin().ClientAddr())
	}

	fence := coord.NewFence(coord.NewMemMarks())
	var (
		mu     sync.Mutex
		writes []string
	)
	write := func(who string, t coord.Token) error {
		return fence.Do(ctx, "report", t, func() error {
			mu.Lock()
			defer mu.Unlock()
			writes = append(writes, fmt.Sprintf("%s (token %d)", who, t))
			return nil
		})
	}

	clients := make([]*coord.Client, 3)
	for i := range clients {
		// What the operator hands worker i (its name at generation 1).
		cred, err := coord.IssueClientCredential(clientSecret, fmt.Sprintf("worker-%d", i), 1)
		if err != nil {
			return err
		}
		cl, err := coord.Connect(ctx, coord.ClientConfig{Members: addrs, Credential: cred})
		if err != nil {
			return err
		}
		defer cl.Close()
		clients[i] = cl
	}
	// Close the member worker-0 talks to once it has written twice.
	victim := clients[0].Member()
	var (
		wg     sync.WaitGroup
		errsMu sync.Mutex
		errs   []error
	)
	for i, cl := range clients {
		wg.Go(func() {
			if err := work(ctx, cl, i, write, func() {
				if i == 0 {
					for _, m := range members {
						if m.Status().Name == victim {
							fmt.Printf("closing %s, worker-0's member\n", victim)
							m.Close()
						}
					}
				}
			}); err != nil {
				errsMu.Lock()
				errs = append(errs, err)
				errsMu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Printf("worker-0 moved from %s to %s\n", victim, clients[0].Member())
	fmt.Printf("%d fenced writes, none refused\n", len(writes))
	return nil
}

// work takes the lock four times, writing once per hold; after its
// second write it calls midway.
func work(ctx context.Context, cl *coord.Client, i int, write func(string, coord.Token) error, midway func()) error {
	name := fmt.Sprintf("worker-%d", i)
	s, err := cl.NewSession(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	m := coord.NewMutex(s, "report")
	for round := range 4 {
		t, err := m.Lock(ctx)
		if err != nil {
			return fmt.Errorf("%s: lock: %w", name, err)
		}
		if err := write(name, t); err != nil {
			return fmt.Errorf("%s: write refused: %w", name, err)
		}
		if err := m.Unlock(ctx); err != nil {
			return fmt.Errorf("%s: unlock: %w", name, err)
		}
		if round == 1 {
			midway()
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("%s: session: %w", name, err)
	}
	return nil
}

// startMembers opens a 3-member cell on loopback, each member serving
// clients on a port of its own.
func startMembers(ctx context.Context, dir string) ([]*coord.Node, error) {
	var peers []coord.Peer
	for i := range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: l.Addr().String()})
		l.Close()
	}
	var nodes []*coord.Node
	for _, p := range peers {
		n, err := coord.Open(ctx, coord.Config{
			Name: p.Name, Addr: p.Addr, Peers: peers, Secret: secret,
			DataDir:      filepath.Join(dir, p.Name),
			ClientAddr:   "127.0.0.1:0",
			ClientSecret: clientSecret,
		})
		if err != nil {
			for _, n := range nodes {
				n.Close()
			}
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}
