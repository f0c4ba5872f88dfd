package coord_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/coordcell/coord"
)

// A transfer between two accounts as a software transaction: read both
// balances, write both, commit only if neither changed meanwhile (else
// run again on the new balances).
func ExampleSTM() {
	nodes, stop := startCell()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := nodes[0].Txn(ctx).Then(
		coord.OpPut("accounts/alice", []byte("100")), coord.OpPut("accounts/bob", []byte("0"))).Commit(); err != nil {
		log.Fatal(err)
	}
	balance := func(tx *coord.STMTx, key string) (int, error) {
		v, err := tx.Get(key)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(v))
	}
	transfer := func(tx *coord.STMTx) error {
		alice, err := balance(tx, "accounts/alice")
		if err != nil {
			return err
		}
		bob, err := balance(tx, "accounts/bob")
		if err != nil {
			return err
		}
		if alice < 30 {
			return fmt.Errorf("alice has only %d", alice)
		}
		tx.Put("accounts/alice", []byte(strconv.Itoa(alice-30)))
		tx.Put("accounts/bob", []byte(strconv.Itoa(bob+30)))
		return nil
	}
	if _, err := coord.STM(ctx, nodes[1], transfer); err != nil {
		log.Fatal(err)
	}
	kvs, _, err := nodes[2].List(ctx, "accounts/")
	if err != nil {
		log.Fatal(err)
	}
	for _, kv := range kvs {
		fmt.Printf("%s: %s\n", kv.Key, kv.Value)
	}
	// Output:
	// accounts/alice: 70
	// accounts/bob: 30
}
