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
		f := fanOut{
			watchers: cfg.Watchers, puts: cfg.WatchPuts,
			watch: func(ctx context.Context, w int, fn func(key string)) error {
				return c.Watch(ctx, w%cell.Members, watchPrefix, fn)
			},
			put: func(ctx context.Context, i int, key string) error {
				return c.Put(ctx, i%cell.Members, key, []byte("x"))
			},
		}
		alls, each, err := f.run(ctx, env)
		if err != nil {
			return nil, err
		}
		label := fmt.Sprintf("watch fan-out, %d watchers, %d puts", cfg.Watchers, cfg.WatchPuts)
		return fanOutMetrics("watch", label, alls, each), nil
	})
}

// fanOut is the measurement of the watch scenarios: watchers watchers
// of watchPrefix, then puts puts one at a time, each waited for until
// every watcher received it.
type fanOut struct {
	watchers, puts int
	// watch starts watcher w, calling fn with each key it receives, and
	// returns once the watch is established.
	watch func(ctx context.Context, w int, fn func(key string)) error
	// put makes the i-th put, of key.
	put func(ctx context.Context, i int, key string) error
	// measured, if set, is called just before the first measured put and
	// just after the last has reached every watcher.
	measured func(start bool)
}

// run returns, for each measured put, the time from its call until the
// last watcher received it (sorted), and the time of every single
// delivery (sorted).
func (f fanOut) run(ctx context.Context, env Env) (alls, each []time.Duration, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// puts[0] is a warm-up that shows every watch is live.
	puts := make([]*watchPut, f.puts+1)
	for i := range puts {
		puts[i] = &watchPut{lat: make([]time.Duration, f.watchers), all: make(chan struct{})}
		puts[i].pending.Store(int64(f.watchers))
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
	for range min(f.watchers, 64) {
		wg.Go(func() {
			for {
				w := int(next.Add(1) - 1)
				if w >= f.watchers {
					return
				}
				err := f.watch(ctx, w, func(key string) {
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
	select {
	case err := <-errc:
		return nil, nil, err
	default:
	}
	env.log("watch: %d watchers started in %v", f.watchers, time.Since(setup).Round(time.Millisecond))
	for i, p := range puts {
		if i == 1 && f.measured != nil {
			f.measured(true)
		}
		p.start.Store(int64(time.Since(base)))
		if err := f.put(ctx, i, watchPrefix+strconv.Itoa(i)); err != nil {
			return nil, nil, fmt.Errorf("watch put %d: %w", i, err)
		}
		select {
		case <-p.all:
		case err := <-errc:
			return nil, nil, err
		case <-time.After(watchWait):
			return nil, nil, fmt.Errorf("watch put %d: %d of %d watchers did not receive it within %v",
				i, p.pending.Load(), f.watchers, watchWait)
		}
		if i == len(puts)-1 && f.measured != nil {
			f.measured(false)
		}
		sleep(ctx, watchGap)
	}
	for _, p := range puts[1:] {
		all := time.Duration(0)
		for _, l := range p.lat {
			all = max(all, l)
		}
		alls = append(alls, all)
		each = append(each, p.lat...)
	}
	alls, each = sortedCopy(alls), sortedCopy(each)
	env.log("watch: all %d received in p50 %v, max %v", f.watchers, percentile(alls, 50), alls[len(alls)-1])
	return alls, each, nil
}

// fanOutMetrics are the figures of a fan-out, named name.*.
func fanOutMetrics(name, label string, alls, each []time.Duration) []Metric {
	return []Metric{
		{Name: name + ".all.p50", Label: label + ": all received, p50", Unit: "ms", Value: ms(percentile(alls, 50))},
		{Name: name + ".all.p99", Label: label + ": all received, p99", Unit: "ms", Value: ms(percentile(alls, 99))},
		{Name: name + ".all.max", Label: label + ": all received, max", Unit: "ms", Value: ms(alls[len(alls)-1])},
		{Name: name + ".each.p50", Label: label + ": one delivery, p50", Unit: "ms", Value: ms(percentile(each, 50))},
		{Name: name + ".each.p99", Label: label + ": one delivery, p99", Unit: "ms", Value: ms(percentile(each, 99))},
	}
}
