package scenario

import (
	"context"
	"fmt"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/hist"
	"github.com/coordcell/coord/bench/internal/proc"
)

// opTimeout bounds one operation of a load.
const opTimeout = 10 * time.Second

// loadResult is the outcome of one closed-loop load point.
type loadResult struct {
	ops      int             // operations started in the measured window
	done     int             // operations that succeeded, warm-up included
	errs     int             // of which failed
	elapsed  time.Duration   // the measured window
	lat      *hist.Histogram // latencies of the successful ones
	firstErr error
	// cpu is this process's CPU time (user + system) from the start of
	// the measured window until its last call returned.
	cpu time.Duration
}

// cpuPerOp returns r's CPU time per successful measured call, in µs (0
// without any).
func (r loadResult) cpuPerOp() float64 {
	if n := r.ops - r.errs; n > 0 {
		return float64(r.cpu.Microseconds()) / float64(n)
	}
	return 0
}

func (r loadResult) rate() float64 { return float64(r.ops-r.errs) / r.elapsed.Seconds() }

// metrics returns the load's throughput, p50 and p99 under name and
// label, with unit the throughput's unit.
func (r loadResult) metrics(name, label, unit string) []Metric {
	out := []Metric{
		{Name: name + ".rate", Label: label + ": throughput", Unit: unit, Value: r.rate(), HigherIsBetter: true},
		{Name: name + ".p50", Label: label + ": p50", Unit: "ms", Value: ms(r.lat.Quantile(50))},
		{Name: name + ".p99", Label: label + ": p99", Unit: "ms", Value: ms(r.lat.Quantile(99))},
	}
	out = append(out, Metric{Name: name + ".cpu_us", Label: label + ": CPU per op (this process: members and callers)", Unit: "µs", Value: r.cpuPerOp()})
	if r.errs > 0 {
		out = append(out, Metric{Name: name + ".errors", Label: label + ": errors", Unit: "ops", Value: float64(r.errs)})
	}
	return out
}

// runLoad runs clients workers, each calling op (with its worker number
// and a per-worker sequence number) one call after another: for warmup
// unmeasured, then for dur measured. Calls that start in the measured
// window count. It fails only when every measured call failed.
func runLoad(ctx context.Context, clients int, warmup, dur time.Duration,
	op func(ctx context.Context, worker, seq int) error) (loadResult, error) {
	var measuring, stop atomic.Bool
	var mu sync.Mutex
	res := loadResult{elapsed: dur, lat: new(hist.Histogram)}
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			lat := new(hist.Histogram)
			ops, errs, done := 0, 0, 0
			var firstErr error
			for seq := 0; !stop.Load() && ctx.Err() == nil; seq++ {
				counted := measuring.Load()
				start := time.Now()
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				var region *trace.Region // in an execution trace (-trace), the measured calls are regions
				if counted {
					region = trace.StartRegion(octx, "op")
				}
				err := op(octx, w, seq)
				if region != nil {
					region.End()
				}
				cancel()
				if err == nil {
					done++
				}
				if !counted {
					continue
				}
				ops++
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				lat.Add(time.Since(start))
			}
			mu.Lock()
			res.ops += ops
			res.done += done
			res.errs += errs
			res.lat.Merge(lat)
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
			mu.Unlock()
		})
	}
	sleep(ctx, warmup)
	measuring.Store(true)
	cpu0 := proc.CPU()
	sleep(ctx, dur)
	stop.Store(true)
	wg.Wait()
	res.cpu = proc.CPU() - cpu0
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if res.ops > 0 && res.errs == res.ops {
		return res, fmt.Errorf("every operation failed, the first with: %w", res.firstErr)
	}
	return res, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
