package scenario

import (
	"context"
	"fmt"
	"strconv"

	"github.com/coordcell/coord/bench/internal/cell"
)

// putKeysPerWorker bounds the keyspace of the put scenario: each worker
// cycles over its own keys.
const putKeysPerWorker = 64

// Put measures writes of cfg.ValueSize-byte values at each concurrency of
// cfg.PutClients, on one cell. Worker w writes through member w%3.
func Put(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		val := value(cfg.ValueSize)
		var out []Metric
		for _, clients := range cfg.PutClients {
			fs := startFsyncs(c)
			res, err := runLoad(ctx, clients, cfg.Warmup, cfg.Duration, func(ctx context.Context, w, seq int) error {
				key := "bench/put/" + strconv.Itoa(w) + "/" + strconv.Itoa(seq%putKeysPerWorker)
				return c.Put(ctx, w%cell.Members, key, val)
			})
			if err != nil {
				return out, fmt.Errorf("put, %d clients: %w", clients, err)
			}
			env.log("put, %d clients: %.0f ops/s", clients, res.rate())
			name, label := fmt.Sprintf("put.c%d", clients), fmt.Sprintf("put %dB, %d clients", cfg.ValueSize, clients)
			out = append(out, res.metrics(name, label, "ops/s")...)
			out = append(out, fs.metrics(c, res.done, name, label)...)
		}
		return out, nil
	})
}
