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
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
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
