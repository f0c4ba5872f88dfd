package scale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/hist"
	"github.com/coordcell/coord/bench/internal/proc"
)

// The operations that measure: memory, the paged list, the puts and the
// watch from far back.

// heapObjects is the Go heap's bytes in objects, live or not yet swept.
const heapObjects = "/memory/classes/heap/objects:bytes"

func readMetrics(names ...string) []int64 {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	out := make([]int64, len(names))
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			out[i] = int64(s[i].Value.Uint64())
		}
	}
	return out
}

// readMem reads the process's memory (and after a GC, with gc, the live
// heap) and the member's status.
func readMem(ctx context.Context, sc cell.Scaler, gc bool) (*Mem, error) {
	mm, err := proc.ReadMemory()
	if err != nil {
		return nil, err
	}
	v := readMetrics(heapObjects, "/memory/classes/total:bytes", "/memory/classes/heap/released:bytes")
	out := &Mem{RSS: mm.RSS, PeakRSS: mm.PeakRSS, RSSAnon: mm.RSSAnon, RSSFile: mm.RSSFile,
		HeapObjects: v[0], GoTotal: v[1], GoReleased: v[2], MemLimit: debug.SetMemoryLimit(-1),
		Goroutines: runtime.NumGoroutine(), CPUSeconds: proc.CPU().Seconds()}
	if gc {
		runtime.GC()
		out.HeapLive = readMetrics(heapObjects)[0]
	}
	sctx, cancel := context.WithTimeout(ctx, opLimit)
	defer cancel()
	out.Status, err = sc.ScaleStatus(sctx)
	return out, err
}

// peaks samples the process's heap and RSS every 5 ms until stopped.
type peaks struct {
	heap, rss atomic.Int64
	stop      chan struct{}
	done      chan struct{}
}

func startPeaks() *peaks {
	p := &peaks{stop: make(chan struct{}), done: make(chan struct{})}
	p.sample()
	go func() {
		defer close(p.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.sample()
			}
		}
	}()
	return p
}

func (p *peaks) sample() {
	h := readMetrics(heapObjects)[0]
	if h > p.heap.Load() {
		p.heap.Store(h)
	}
	if m, err := proc.ReadMemory(); err == nil && m.RSS > p.rss.Load() {
		p.rss.Store(m.RSS)
	}
}

// end stops the sampling and returns the peaks.
func (p *peaks) end() (heap, rss int64) {
	close(p.stop)
	<-p.done
	p.sample()
	return p.heap.Load(), p.rss.Load()
}

// list reads r.Keys keys page by page, keeping none.
func list(ctx context.Context, sc cell.Scaler, r ListRequest) (*ListResult, error) {
	if r.Keys < 1 || r.Page < 1 || r.Page > 100_000 {
		return nil, errors.New("scale: list out of range")
	}
	runtime.GC()
	res := &ListResult{HeapBase: readMetrics(heapObjects)[0]}
	if m, err := proc.ReadMemory(); err == nil {
		res.RSSBase = m.RSS
	}
	pk := startPeaks()
	var pages hist.Histogram
	start := time.Now()
	after := ""
	var err error
	for res.Keys < r.Keys {
		pctx, cancel := context.WithTimeout(ctx, opLimit)
		t := time.Now()
		var n int
		var b int64
		n, after, b, err = sc.ListPage(pctx, r.Prefix, after, min(r.Page, r.Keys-res.Keys))
		cancel()
		if err != nil || n == 0 {
			break
		}
		pages.Add(time.Since(t))
		res.Keys += n
		res.Bytes += b
		res.Pages++
	}
	res.Seconds = time.Since(start).Seconds()
	res.HeapPeak, res.RSSPeak = pk.end()
	res.PageP99Ms = float64(pages.Quantile(99)) / float64(time.Millisecond)
	if err != nil {
		return res, fmt.Errorf("list page %d: %w", res.Pages+1, err)
	}
	if res.Keys < r.Keys {
		return res, fmt.Errorf("list: %d keys under %q, %d asked", res.Keys, r.Prefix, r.Keys)
	}
	return res, nil
}

// puts writes r.Count single puts and returns their revisions' range.
func puts(ctx context.Context, sc cell.Scaler, r PutsRequest) (*PutsResult, error) {
	if r.Count < 1 || r.Workers < 1 || r.Workers > 1000 || r.ValueSize < 0 || r.ValueSize > 1<<20 {
		return nil, errors.New("scale: puts out of range")
	}
	val := value(r.ValueSize)
	var next atomic.Int64
	var mu sync.Mutex
	res := &PutsResult{MinRev: math.MaxInt64}
	errs := make([]error, r.Workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range r.Workers {
		wg.Go(func() {
			lo, hi := int64(math.MaxInt64), int64(0)
			defer func() {
				mu.Lock()
				res.MinRev, res.MaxRev = min(res.MinRev, lo), max(res.MaxRev, hi)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= r.Count {
					return
				}
				var rev int64
				var err error
				for try := 0; try <= retries; try++ {
					pctx, cancel := context.WithTimeout(ctx, opLimit)
					rev, err = sc.PutRev(pctx, Key(r.Prefix, r.From+i), val)
					cancel()
					if err == nil {
						break
					}
				}
				if err != nil {
					errs[w] = err
					return
				}
				lo, hi = min(lo, rev), max(hi, rev)
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	return res, errors.Join(append(errs, ctx.Err())...)
}

// watchFrom watches from r.AfterRev and waits for the change at
// r.UntilRev.
func watchFrom(ctx context.Context, sc cell.Scaler, r WatchFromRequest) (*WatchFromResult, error) {
	if r.Limit <= 0 || r.Limit > time.Hour || r.UntilRev <= r.AfterRev {
		return nil, errors.New("scale: watch out of range")
	}
	runtime.GC()
	res := &WatchFromResult{HeapBase: readMetrics(heapObjects)[0]}
	pk := startPeaks()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var events atomic.Int64
	var first atomic.Int64 // nanoseconds from start to the first event
	reached := make(chan struct{})
	var once sync.Once
	start := time.Now()
	ended, err := sc.WatchFrom(wctx, r.Prefix, r.AfterRev, func(rev int64) {
		if events.Add(1) == 1 {
			first.Store(int64(time.Since(start)))
		}
		if rev >= r.UntilRev {
			once.Do(func() { close(reached) })
		}
	})
	if err != nil {
		pk.end()
		return nil, err
	}
	t := time.NewTimer(r.Limit)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-reached:
			res.Seconds = time.Since(start).Seconds()
			break wait
		case <-t.C:
			res.Error = fmt.Sprintf("the change at revision %d had not arrived after %v", r.UntilRev, r.Limit)
			break wait
		case <-tick.C:
			if err := ended(); err != nil {
				res.Error = "the watch ended: " + err.Error()
				break wait
			}
		case <-ctx.Done():
			pk.end()
			return nil, ctx.Err()
		}
	}
	res.Events = int(events.Load())
	res.FirstSeconds = float64(first.Load()) / float64(time.Second)
	res.HeapPeak, _ = pk.end()
	return res, nil
}
