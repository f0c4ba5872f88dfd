package coord_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/coordcell/coord"
)

// A compare-and-set: the second writer of version 1 loses.
func ExampleNode_Put() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	kv, err := nodes[0].Put(ctx, "config", []byte("v1"), coord.IfVersion(0)) // create only
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created at version", kv.Version)
	if _, err := nodes[1].Put(ctx, "config", []byte("v2"), coord.IfVersion(kv.Version)); err != nil {
		log.Fatal(err)
	}
	_, err = nodes[2].Put(ctx, "config", []byte("v2'"), coord.IfVersion(kv.Version))
	fmt.Println("stale writer:", errors.Is(err, coord.ErrConflict))
	got, err := nodes[2].Get(ctx, "config") // linearizable, on any member
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s at version %d\n", got.Value, got.Version)
	// Output:
	// created at version 1
	// stale writer: true
	// v2 at version 2
}

// List, then watch from the listing's revision: nothing is missed.
func ExampleNode_Watch() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := nodes[0].Put(ctx, "jobs/1", []byte("queued"), coord.IfVersion(0)); err != nil {
		log.Fatal(err)
	}
	kvs, rev, err := nodes[1].List(ctx, "jobs/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listed", len(kvs))
	w := nodes[1].Watch(ctx, "jobs/", coord.FromRev(rev))
	defer w.Close()
	if _, err := nodes[2].Txn(ctx).Then(
		coord.OpPut("jobs/1", []byte("done")), coord.OpPut("jobs/2", []byte("queued"))).Commit(); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		ev := <-w.Events()
		fmt.Println(ev.Type, ev.KV.Key, string(ev.KV.Value), "end of revision:", ev.EndOfRev)
	}
	// Output:
	// listed 1
	// PUT jobs/1 done end of revision: false
	// PUT jobs/2 queued end of revision: true
}

// Ephemeral keys live as long as their session.
func ExampleSession() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s, err := nodes[0].NewSession(ctx, coord.WithTTL(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := nodes[0].Put(ctx, "workers/w1", []byte("10.0.0.1"), coord.Ephemeral(s)); err != nil {
		log.Fatal(err)
	}
	kvs, _, _ := nodes[1].List(ctx, "workers/")
	fmt.Println("workers while the session lives:", len(kvs))
	if err := s.Close(ctx); err != nil {
		log.Fatal(err)
	}
	<-s.Done()
	kvs, _, _ = nodes[1].List(ctx, "workers/")
	fmt.Println("workers after Close:", len(kvs), errors.Is(s.Err(), coord.ErrSessionClosed))
	// Output:
	// workers while the session lives: 1
	// workers after Close: 0 true
}

// runOnce does a job at most once at a time across the cell. It takes a
// Cell, so it works the same in a member (*Node) and, once clients
// exist, in a process that is not one.
func runOnce(ctx context.Context, c coord.Cell, job string) (coord.Token, error) {
	s, err := c.NewSession(ctx, coord.WithTTL(c.MinSessionTTL()))
	if err != nil {
		return 0, err
	}
	defer s.Close(ctx)
	m := coord.NewMutex(s, "jobs/"+job)
	token, err := m.Lock(ctx)
	if err != nil {
		return 0, err
	}
	defer m.Unlock(ctx)
	// Fence the job's writes with the token.
	if _, err := c.Put(ctx, "done/"+job, []byte(token.String())); err != nil {
		return 0, err
	}
	return token, nil
}

// Code written against Cell works with any way into the cell.
func ExampleCell() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var c coord.Cell = nodes[1]
	first, err := runOnce(ctx, c, "report")
	if err != nil {
		log.Fatal(err)
	}
	second, err := runOnce(ctx, nodes[2], "report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the second run's token is greater:", second > first)
	kv, err := c.Get(ctx, "done/report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("last run fenced with its token:", string(kv.Value) == second.String())
	// Output:
	// the second run's token is greater: true
	// last run fenced with its token: true
}
