package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/hist"
	"github.com/coordcell/coord/bench/internal/proc"
)

// opLimit bounds one operation of a phase (a batch, a put, a page).
const opLimit = 30 * time.Second

// retries is how often a batch that failed for another reason than the
// quota is written again before the load fails.
const retries = 5

// Service answers the scale operations in a member process.
type Service struct {
	m cell.Member
	// prof is the CPU profile's file while one runs (OpProfile).
	prof *os.File
	// trickle is the background writer's, while one runs.
	trickle struct {
		cancel context.CancelFunc
		done   chan struct{}
		errs   atomic.Int64
	}
}

// NewService returns the service of member m.
func NewService(m cell.Member) *Service { return &Service{m: m} }

// Close stops the background writer, if one runs; every other operation
// ends before it answers.
func (s *Service) Close() error {
	s.stopTrickle()
	return s.profile("")
}

// profile starts a CPU profile of this process into file, or with ""
// stops the one running.
func (s *Service) profile(file string) error {
	if file == "" {
		if s.prof != nil {
			pprof.StopCPUProfile()
			err := s.prof.Close()
			s.prof = nil
			return err
		}
		return nil
	}
	if s.prof != nil {
		return errors.New("scale: a profile runs already")
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	s.prof = f
	return nil
}

// startTrickle starts the background writer.
func (s *Service) startTrickle(t Trickle) error {
	if t.Every < time.Millisecond || t.Key == "" {
		return errors.New("scale: trickle out of range")
	}
	s.stopTrickle()
	ctx, cancel := context.WithCancel(context.Background())
	s.trickle.cancel, s.trickle.done = cancel, make(chan struct{})
	s.trickle.errs.Store(0)
	go func() {
		defer close(s.trickle.done)
		tick := time.NewTicker(t.Every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pctx, cancel := context.WithTimeout(ctx, opLimit)
			if s.m.Put(pctx, t.Key, []byte("x")) != nil && ctx.Err() == nil {
				s.trickle.errs.Add(1)
			}
			cancel()
		}
	}()
	return nil
}

// stopTrickle stops the background writer and returns how many of its
// puts failed.
func (s *Service) stopTrickle() int64 {
	if s.trickle.cancel == nil {
		return 0
	}
	s.trickle.cancel()
	<-s.trickle.done
	s.trickle.cancel = nil
	return s.trickle.errs.Load()
}

// Handle does one operation.
func (s *Service) Handle(ctx context.Context, op string, body json.RawMessage) (any, error) {
	sc, ok := s.m.(cell.Scaler)
	if !ok {
		return nil, fmt.Errorf("scale: this side's member (%T) has no scale operations", s.m)
	}
	decode := func(v any) error {
		if err := json.Unmarshal(body, v); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		return nil
	}
	switch op {
	case OpLoad:
		var l Load
		if err := decode(&l); err != nil {
			return nil, err
		}
		return runLoad(ctx, sc, l)
	case OpMem:
		var r MemRequest
		if err := decode(&r); err != nil {
			return nil, err
		}
		return readMem(ctx, sc, r.GC)
	case OpMemLimit:
		var limit int64
		if err := decode(&limit); err != nil {
			return nil, err
		}
		if limit < 0 {
			limit = math.MaxInt64
		}
		prev := debug.SetMemoryLimit(limit)
		runtime.GC()
		return prev, nil
	case OpList:
		var r ListRequest
		if err := decode(&r); err != nil {
			return nil, err
		}
		return list(ctx, sc, r)
	case OpPuts:
		var r PutsRequest
		if err := decode(&r); err != nil {
			return nil, err
		}
		return puts(ctx, sc, r)
	case OpWatchFrom:
		var r WatchFromRequest
		if err := decode(&r); err != nil {
			return nil, err
		}
		return watchFrom(ctx, sc, r)
	case OpGet:
		var key string
		if err := decode(&key); err != nil {
			return nil, err
		}
		start := time.Now()
		gctx, cancel := context.WithTimeout(ctx, opLimit)
		defer cancel()
		if err := s.m.Get(gctx, key, false); err != nil {
			return nil, err
		}
		return GetResult{Seconds: time.Since(start).Seconds()}, nil
	case OpStatus:
		return sc.ScaleStatus(ctx)
	case OpAddLearner, OpRemove:
		var r Membership
		if err := decode(&r); err != nil {
			return nil, err
		}
		mctx, cancel := context.WithTimeout(ctx, opLimit)
		defer cancel()
		if op == OpAddLearner {
			return nil, sc.AddLearner(mctx, r.Name, r.PeerAddr)
		}
		return nil, sc.RemoveMember(mctx, r.Name, r.PeerAddr)
	case OpProfile:
		var file string
		if err := decode(&file); err != nil {
			return nil, err
		}
		return nil, s.profile(file)
	case OpTrickle:
		var t Trickle
		if err := decode(&t); err != nil {
			return nil, err
		}
		if t.Every == 0 {
			return s.stopTrickle(), nil
		}
		return nil, s.startTrickle(t)
	case OpQuotaCheck:
		var r QuotaCheck
		if err := decode(&r); err != nil {
			return nil, err
		}
		return quotaCheck(ctx, s.m, sc, r)
	}
	return nil, errors.New("scale: unknown operation " + op)
}

// value returns a value of n bytes.
func value(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return v
}

// runLoad writes l's keys, batch by batch from a shared counter.
func runLoad(ctx context.Context, sc cell.Scaler, l Load) (*LoadResult, error) {
	if l.Batch < 1 || l.Batch > 1000 || l.Writers < 1 || l.Writers > 1000 || l.From < 0 || l.To < l.From ||
		l.ValueSize < 0 || l.ValueSize > 1<<20 {
		return nil, errors.New("scale: load out of range")
	}
	val := value(l.ValueSize)
	perKey := int64(KeyLen(l.Prefix) + l.ValueSize)
	var next atomic.Int64
	next.Store(int64(l.From))
	var stop atomic.Bool
	var mu sync.Mutex
	res := &LoadResult{}
	var wg sync.WaitGroup
	errs := make([]error, l.Writers)
	start := time.Now()
	for w := range l.Writers {
		wg.Go(func() {
			keys := make([]string, 0, l.Batch)
			for !stop.Load() && ctx.Err() == nil {
				from := int(next.Add(int64(l.Batch))) - l.Batch
				if from >= l.To {
					return
				}
				keys = keys[:0]
				for i := from; i < min(from+l.Batch, l.To); i++ {
					keys = append(keys, Key(l.Prefix, i))
				}
				written, refused, retried, err := writeBatch(ctx, sc, keys, val, l.UntilQuota)
				mu.Lock()
				res.Keys += written
				res.Bytes += int64(written) * perKey
				res.Retries += retried
				if refused != nil {
					res.RefusedBatches++
					if !res.Refused {
						res.Refused, res.RefusedError = true, refused.Error()
					}
				}
				mu.Unlock()
				if err != nil {
					errs[w] = err
					stop.Store(true)
					return
				}
				if refused != nil {
					stop.Store(true) // the cap is the cell's: every writer is at it
					return
				}
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return res, err
	}
	return res, nil
}

// writeBatch writes keys in one transaction, again after a failure that
// is not the quota's. A refusal by the quota, with untilQuota, has the
// keys written one at a time until one is refused: it returns the keys
// written and the refusal.
func writeBatch(ctx context.Context, sc cell.Scaler, keys []string, val []byte, untilQuota bool) (written int, refused error, retried int, err error) {
	for try := 0; ; try++ {
		bctx, cancel := context.WithTimeout(ctx, opLimit)
		err = sc.PutBatch(bctx, keys, val)
		cancel()
		if err == nil {
			return len(keys), nil, try, nil
		}
		if sc.QuotaRefused(err) {
			if !untilQuota {
				return 0, nil, try, fmt.Errorf("the quota refused a batch of the load: %w", err)
			}
			break
		}
		if try == retries || ctx.Err() != nil {
			return 0, nil, try, fmt.Errorf("batch from %s: %w", keys[0], err)
		}
	}
	refused = err
	for _, k := range keys {
		pctx, cancel := context.WithTimeout(ctx, opLimit)
		_, err := sc.PutRev(pctx, k, val)
		cancel()
		if sc.QuotaRefused(err) {
			return written, refused, 0, nil
		}
		if err != nil {
			return written, refused, 0, fmt.Errorf("single put of %s at the cap: %w", k, err)
		}
		written++
	}
	return written, refused, 0, nil
}

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

// quotaCheck tries writes at the cap, deletes, and a write after them.
func quotaCheck(ctx context.Context, m cell.Member, sc cell.Scaler, r QuotaCheck) (*QuotaResult, error) {
	if r.Writes < 0 || r.Writes > 100_000 || r.Deletes < 0 || r.Deletes > 1_000_000 || r.ValueSize < 0 || r.ValueSize > 1<<20 {
		return nil, errors.New("scale: quota check out of range")
	}
	val := value(r.ValueSize)
	res := &QuotaResult{Writes: r.Writes, Deletes: r.Deletes}
	for i := range r.Writes {
		pctx, cancel := context.WithTimeout(ctx, opLimit)
		_, err := sc.PutRev(pctx, Key(r.Prefix, r.WriteFrom+i), val)
		cancel()
		switch {
		case err == nil:
			res.WritesOK++
		case sc.QuotaRefused(err):
			res.WritesRefused++
			if res.RefusedError == "" {
				res.RefusedError = err.Error()
			}
		default:
			res.WritesOther++
			if res.OtherError == "" {
				res.OtherError = err.Error()
			}
		}
	}
	start := time.Now()
	keys := make([]string, 0, 100)
	for i := 0; i < r.Deletes; i += 100 {
		keys = keys[:0]
		for j := i; j < min(i+100, r.Deletes); j++ {
			keys = append(keys, Key(r.DeletePrefix, r.DeleteFrom+j))
		}
		dctx, cancel := context.WithTimeout(ctx, opLimit)
		err := sc.DeleteBatch(dctx, keys)
		cancel()
		if err != nil {
			res.DeleteError = err.Error()
			break
		}
		res.Deleted += len(keys)
	}
	res.DeleteSeconds = time.Since(start).Seconds()
	pctx, cancel := context.WithTimeout(ctx, opLimit)
	_, err := sc.PutRev(pctx, Key(r.Prefix, r.WriteFrom+r.Writes), val)
	cancel()
	switch {
	case err == nil:
		res.AfterDelete = "ok"
	case sc.QuotaRefused(err):
		res.AfterDelete = "refused"
	default:
		res.AfterDelete = err.Error()
	}
	gctx, cancel := context.WithTimeout(ctx, opLimit)
	err = m.Get(gctx, Key(r.DeletePrefix, r.DeleteFrom+r.Deletes), false)
	cancel()
	res.GetOK = err == nil
	if err != nil {
		res.GetError = err.Error()
	}
	return res, ctx.Err()
}
