package coord_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/coordcell/coord"
)

// A namespace for the application's keys: clearing it with
// OpDeletePrefix("") leaves the lock taken through it held.
func ExampleNamespace() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	app := coord.Namespace(nodes[0], "app/")
	if _, err := app.Put(ctx, "config", []byte("v1")); err != nil {
		log.Fatal(err)
	}
	s, err := app.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	m := coord.NewMutex(s, "db") // its keys stay under locks/db/
	if _, err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}

	kvs, _, err := app.List(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("in the namespace:", kvs[0].Key)
	kv, err := nodes[1].Get(ctx, "app/config")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("in the cell:", kv.Key)

	res, err := app.Txn(ctx).Then(coord.OpDeletePrefix("")).Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", res.Results[0].Deleted)
	held, err := nodes[2].Txn(ctx).If(m.IsOwner()).Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("lock still held:", held.Succeeded)
	// Output:
	// in the namespace: config
	// in the cell: app/config
	// deleted: 1
	// lock still held: true
}
