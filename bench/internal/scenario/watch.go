package scenario

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

const (
	watchPrefix = "bench/watch/"
	// watchWait bounds the wait for every watcher to receive one put.
	watchWait = 30 * time.Second
	// watchGap separates consecutive puts.
	watchGap = 10 * time.Millisecond
)

// watchPut is one put of the watch scenario and what its watchers saw.
type watchPut struct {
	start   atomic.Int64    // when the put was called, since the scenario's base time
	lat     []time.Duration // by watcher
	pending atomic.Int64    // watchers yet to receive it
	all     chan struct{}   // closed when none is pending
}

// Watch starts cfg.Watchers watchers on one prefix, watcher i served by
// member i%3, then makes cfg.WatchPuts puts one at a time (through the
// members in turn) and measures, per put, the time from the call until
// every watcher has received it. It reports that time's median, p99 and
// max over the puts, and the p50 and p99 of single deliveries.
func Watch(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	return withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// puts[0] is a warm-up that shows every watch is live.
		puts := make([]*watchPut, cfg.WatchPuts+1)
		for i := range puts {
			puts[i] = &watchPut{lat: make([]time.Duration, cfg.Watchers), all: make(chan struct{})}
			puts[i].pending.Store(int64(cfg.Watchers))
		}
		base := time.Now()
		errc := make(chan error, 1)
		fail := func(err error) {
			select {
			case errc <- err:
			default:
			}
		}
		var wg sync.WaitGroup
		var next atomic.Int64
		setup := time.Now()
		for range min(cfg.Watchers, 64) {
			wg.Go(func() {
				for {
					w := int(next.Add(1) - 1)
					if w >= cfg.Watchers {
						return
					}
					err := c.Watch(ctx, w%cell.Members, watchPrefix, func(key string) {
						i, err := strconv.Atoi(strings.TrimPrefix(key, watchPrefix))
						if err != nil || i >= len(puts) {
							fail(fmt.Errorf("watcher %d: unexpected key %q", w, key))
							return
						}
						p := puts[i]
						p.lat[w] = time.Since(base) - time.Duration(p.start.Load())
						if p.pending.Add(-1) == 0 {
							close(p.all)
						}
					})
					if err != nil {
						fail(fmt.Errorf("watcher %d: %w", w, err))
						return
					}
				}
			})
		}
		wg.Wait()
		env.log("watch: %d watchers started in %v", cfg.Watchers, time.Since(setup).Round(time.Millisecond))
		for i, p := range puts {
			p.start.Store(int64(time.Since(base)))
			if err := c.Put(ctx, i%cell.Members, watchPrefix+strconv.Itoa(i), []byte("x")); err != nil {
				return nil, fmt.Errorf("watch put %d: %w", i, err)
			}
			select {
			case <-p.all:
			case err := <-errc:
				return nil, err
			case <-time.After(watchWait):
				return nil, fmt.Errorf("watch put %d: %d of %d watchers did not receive it within %v",
					i, p.pending.Load(), cfg.Watchers, watchWait)
			}
			sleep(ctx, watchGap)
		}
		var alls, each []time.Duration
		for _, p := range puts[1:] {
			all := time.Duration(0)
			for _, l := range p.lat {
				all = max(all, l)
			}
			alls = append(alls, all)
			each = append(each, p.lat...)
		}
		alls, each = sortedCopy(alls), sortedCopy(each)
		env.log("watch: all %d received in p50 %v, max %v", cfg.Watchers, percentile(alls, 50), alls[len(alls)-1])
		label := fmt.Sprintf("watch fan-out, %d watchers, %d puts", cfg.Watchers, cfg.WatchPuts)
		return []Metric{
			{Name: "watch.all.p50", Label: label + ": all received, p50", Unit: "ms", Value: ms(percentile(alls, 50))},
			{Name: "watch.all.p99", Label: label + ": all received, p99", Unit: "ms", Value: ms(percentile(alls, 99))},
			{Name: "watch.all.max", Label: label + ": all received, max", Unit: "ms", Value: ms(alls[len(alls)-1])},
			{Name: "watch.each.p50", Label: label + ": one delivery, p50", Unit: "ms", Value: ms(percentile(each, 50))},
			{Name: "watch.each.p99", Label: label + ": one delivery, p99", Unit: "ms", Value: ms(percentile(each, 99))},
		}, nil
	})
}
