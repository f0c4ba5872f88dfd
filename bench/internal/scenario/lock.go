package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// lockSessionTTL is the TTL of the lock holders' sessions.
const lockSessionTTL = 10 * time.Second

// Lock measures Lock+Unlock cycles by cfg.LockHolders holders, each with
// its own session on member h%3: all on one lock (contended), then each
// on its own lock (uncontended).
func Lock(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		return lockCycles(ctx, env, cfg, "lock", "", func(h int) (cell.Session, error) {
			return c.NewSession(ctx, h%cell.Members, lockSessionTTL)
		})
	})
}

// lockCycles runs the lock load on the sessions newSession makes (one per
// holder), naming its figures name.* and its labels with via.
func lockCycles(ctx context.Context, env Env, cfg Config, name, via string,
	newSession func(h int) (cell.Session, error)) (out []Metric, err error) {
	sessions := make([]cell.Session, cfg.LockHolders)
	defer func() {
		for _, s := range sessions {
			if s != nil {
				err = errors.Join(err, s.Close(ctx))
			}
		}
	}()
	for h := range sessions {
		if sessions[h], err = newSession(h); err != nil {
			return nil, fmt.Errorf("lock holder %d's session: %w", h, err)
		}
	}
	return lockLoad(ctx, env, cfg, name, via, func(h int, lock string) cell.Mutex { return sessions[h].NewMutex(lock) })
}

// lockLoad runs cfg.LockHolders holders, holder h taking and releasing
// mutex(h, lock) one cycle after another: all on one lock (contended),
// then each on its own (uncontended).
func lockLoad(ctx context.Context, env Env, cfg Config, name, via string,
	mutex func(h int, lock string) cell.Mutex) (out []Metric, err error) {
	for _, contended := range []bool{true, false} {
		kind, lock := "uncontended", func(h int) string { return "bench-" + strconv.Itoa(h) }
		if contended {
			kind, lock = "contended", func(int) string { return "bench" }
		}
		res, err := runLoad(ctx, cfg.LockHolders, cfg.Warmup, cfg.Duration, func(ctx context.Context, h, _ int) error {
			m := mutex(h, lock(h))
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		})
		if err != nil {
			return out, fmt.Errorf("%s lock%s: %w", kind, via, err)
		}
		env.log("%s lock%s, %d holders: %.0f cycles/s", kind, via, cfg.LockHolders, res.rate())
		out = append(out, res.metrics(name+"."+kind,
			fmt.Sprintf("lock+unlock %s%s, %d holders", kind, via, cfg.LockHolders), "cycles/s")...)
	}
	return out, nil
}
