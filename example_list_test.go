package coord_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/coordcell/coord"
)

// Limit and After page through a prefix too large for one read: each
// page starts after the last key of the one before, and a page shorter
// than the limit is the last.
func ExampleLimit() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 10 {
		if _, err := nodes[0].Put(ctx, fmt.Sprintf("jobs/%02d", i), []byte("queued")); err != nil {
			log.Fatal(err)
		}
	}

	const pageSize = 4
	after := ""
	for {
		kvs, _, err := nodes[1].List(ctx, "jobs/", coord.Limit(pageSize), coord.After(after))
		if err != nil {
			log.Fatal(err)
		}
		var keys []string
		for _, kv := range kvs {
			keys = append(keys, kv.Key)
		}
		fmt.Println(keys)
		if len(kvs) < pageSize {
			break // the last page
		}
		after = kvs[len(kvs)-1].Key
	}
	// Output:
	// [jobs/00 jobs/01 jobs/02 jobs/03]
	// [jobs/04 jobs/05 jobs/06 jobs/07]
	// [jobs/08 jobs/09]
}

// After alone reads the rest of a prefix from a key on: here, the jobs
// queued after the one a worker last took.
func ExampleAfter() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := nodes[0].Put(ctx, "jobs/"+id, []byte("queued")); err != nil {
			log.Fatal(err)
		}
	}

	kvs, _, err := nodes[2].List(ctx, "jobs/", coord.After("jobs/b"))
	if err != nil {
		log.Fatal(err)
	}
	for _, kv := range kvs {
		fmt.Println(kv.Key)
	}
	// Output:
	// jobs/c
	// jobs/d
}
