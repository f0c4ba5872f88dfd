package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/coordcell/coord/bench/internal/cell"
)

// Get measures linearizable then serializable reads of cfg.GetKeys
// existing keys by cfg.GetClients clients, worker w reading through
// member w%3.
func Get(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		if err := preload(ctx, c, cfg.GetKeys, cfg.ValueSize); err != nil {
			return nil, err
		}
		var out []Metric
		for _, serializable := range []bool{false, true} {
			kind := "linearizable"
			if serializable {
				kind = "serializable"
			}
			res, err := runLoad(ctx, cfg.GetClients, cfg.Warmup, cfg.Duration, func(ctx context.Context, w, _ int) error {
				return c.Get(ctx, w%cell.Members, getKey(rand.IntN(cfg.GetKeys)), serializable)
			})
			if err != nil {
				return out, fmt.Errorf("%s get: %w", kind, err)
			}
			env.log("%s get, %d clients: %.0f ops/s", kind, cfg.GetClients, res.rate())
			out = append(out, res.metrics("get."+kind,
				fmt.Sprintf("get %s, %d clients", kind, cfg.GetClients), "ops/s")...)
		}
		return out, nil
	})
}

func getKey(i int) string { return "bench/get/" + strconv.Itoa(i) }

// preload writes n keys of size-byte values with a few concurrent writers.
func preload(ctx context.Context, c cell.Cell, n, size int) error {
	val := value(size)
	const writers = 16
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += writers {
				errs[w] = c.Put(ctx, i%cell.Members, getKey(i), val)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("preload %d keys: %w", n, err)
		}
	}
	return nil
}
