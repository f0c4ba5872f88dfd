package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/coordcell/coord/bench/internal/cell"
)

// connectClients connects n clients, client i to member i%3, a few at a
// time. On error the ones connected are closed.
func connectClients(ctx context.Context, c cell.Cell, n int) ([]cell.Client, error) {
	conn, ok := c.(cell.Connector)
	if !ok {
		return nil, fmt.Errorf("the %s cell serves no clients", c.Side())
	}
	clients := make([]cell.Client, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range clients {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			clients[i], errs[i] = conn.Connect(ctx, i%cell.Members, "bench-client-"+strconv.Itoa(i))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeClients(clients)
		return nil, err
	}
	return clients, nil
}

// closeClients closes every client that was connected.
func closeClients(clients []cell.Client) {
	for _, cl := range clients {
		if cl != nil {
			cl.Close()
		}
	}
}

// ClientPut measures writes of cfg.ValueSize-byte values through three
// clients on loopback, one per member (coord: coord.Connect; etcd: its
// gRPC client), at each concurrency of cfg.ClientCallers, caller w using
// client w%3; and the same load in-process (Cell.Put, as the put
// scenario) right after each point, so both come from one cell and run.
func ClientPut(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		clients, err := connectClients(ctx, c, cell.Members)
		if err != nil {
			return nil, err
		}
		defer closeClients(clients)
		val := value(cfg.ValueSize)
		var out []Metric
		for _, callers := range cfg.ClientCallers {
			for _, inproc := range []bool{false, true} {
				via, name := "through clients", fmt.Sprintf("client-put.c%d", callers)
				if inproc {
					via, name = "in-process", fmt.Sprintf("client-put.inproc.c%d", callers)
				}
				res, err := runLoad(ctx, callers, cfg.Warmup, cfg.Duration, func(ctx context.Context, w, seq int) error {
					key := "bench/client-put/" + strconv.Itoa(w) + "/" + strconv.Itoa(seq%putKeysPerWorker)
					if inproc {
						return c.Put(ctx, w%cell.Members, key, val)
					}
					return clients[w%cell.Members].Put(ctx, key, val)
				})
				if err != nil {
					return out, fmt.Errorf("put %s, %d callers: %w", via, callers, err)
				}
				env.log("put %s, %d callers: %.0f ops/s", via, callers, res.rate())
				out = append(out, res.metrics(name, fmt.Sprintf("put %dB %s, %d callers", cfg.ValueSize, via, callers), "ops/s")...)
			}
		}
		return out, nil
	})
}

// ClientGet measures linearizable reads of cfg.GetKeys existing keys by
// cfg.GetClients callers through three clients on loopback, one per
// member, caller w using client w%3.
func ClientGet(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		if err := preload(ctx, c, cfg.GetKeys, cfg.ValueSize); err != nil {
			return nil, err
		}
		clients, err := connectClients(ctx, c, cell.Members)
		if err != nil {
			return nil, err
		}
		defer closeClients(clients)
		res, err := runLoad(ctx, cfg.GetClients, cfg.Warmup, cfg.Duration, func(ctx context.Context, w, _ int) error {
			return clients[w%cell.Members].Get(ctx, getKey(rand.IntN(cfg.GetKeys)))
		})
		if err != nil {
			return nil, fmt.Errorf("linearizable get through clients: %w", err)
		}
		env.log("linearizable get through clients, %d callers: %.0f ops/s", cfg.GetClients, res.rate())
		return res.metrics("client-get.linearizable",
			fmt.Sprintf("get linearizable through clients, %d callers", cfg.GetClients), "ops/s"), nil
	})
}

// ClientLock measures Lock+Unlock cycles as the lock scenario does, but
// with each holder's session on one of three clients on loopback, one per
// member (holder h on client h%3; etcd: its gRPC client).
func ClientLock(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		clients, err := connectClients(ctx, c, cell.Members)
		if err != nil {
			return nil, err
		}
		defer closeClients(clients)
		return lockCycles(ctx, env, cfg, "client-lock", " through clients", func(h int) (cell.Session, error) {
			return clients[h%cell.Members].NewSession(ctx, lockSessionTTL)
		})
	})
}
