package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/hist"
)

// MemberLoad is one member process's share of a load point of the
// multi-process shape (-shape procs): Workers workers, numbered from
// FirstWorker among every process's, calling this process's member.
type MemberLoad struct {
	// Kind is one of the MemberLoad kinds.
	Kind        string        `json:"kind"`
	Workers     int           `json:"workers"`
	FirstWorker int           `json:"first_worker"`
	Warmup      time.Duration `json:"warmup"`
	Duration    time.Duration `json:"duration"`
	ValueSize   int           `json:"value_size"`
	// Keys is the key space of the gets (and of their preload).
	Keys int `json:"keys"`
	// Profile, when set, is the file into which the process writes its
	// CPU profile over the point (warm-up and measured window).
	Profile string `json:"profile,omitempty"`
}

// The kinds of MemberLoad.
const (
	LoadPut             = "put"
	LoadPreload         = "preload" // writes Keys keys for the gets, unmeasured
	LoadGetLinearizable = "get-linearizable"
	LoadGetSerializable = "get-serializable"
	LoadLockContended   = "lock-contended"
	LoadLockUncontended = "lock-uncontended"
)

// MemberLoadResult is what one process's share did.
type MemberLoadResult struct {
	Ops            int            `json:"ops"`
	Errors         int            `json:"errors"`
	Done           int            `json:"done"`
	ElapsedSeconds float64        `json:"elapsed_seconds"`
	Latency        hist.Histogram `json:"latency"`
	FirstError     string         `json:"first_error,omitempty"`
	// CPUSeconds is the process's CPU time (user + system: its member
	// and its share of the callers) from the start of the measured
	// window until the last call returned; Leader says whether its
	// member led at the end.
	CPUSeconds float64 `json:"cpu_seconds"`
	Leader     bool    `json:"leader"`
}

// validate checks a MemberLoad from the parent.
func (l MemberLoad) validate() error {
	switch {
	case l.Workers < 0 || l.Workers > 10_000 || l.FirstWorker < 0:
		return fmt.Errorf("member load: %d workers from %d", l.Workers, l.FirstWorker)
	case l.ValueSize < 0 || l.ValueSize > 1<<20 || l.Keys < 0 || l.Keys > 10_000_000:
		return errors.New("member load: size out of range")
	case l.Warmup < 0 || l.Duration < 0 || l.Duration > time.Hour:
		return errors.New("member load: duration out of range")
	case l.Keys < 1 && (l.Kind == LoadPreload || l.Kind == LoadGetLinearizable || l.Kind == LoadGetSerializable):
		return errors.New("member load: gets need keys")
	}
	return nil
}

// RunMemberLoad runs l on m, as the one-process scenarios run the same
// point on a cell.Cell: put, get and lock with the same keys, values,
// lock names and session TTL.
func RunMemberLoad(ctx context.Context, m cell.Member, l MemberLoad) (*MemberLoadResult, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	val := value(l.ValueSize)
	var op func(ctx context.Context, w, seq int) error
	switch l.Kind {
	case LoadPreload:
		return &MemberLoadResult{}, preloadMember(ctx, m, l.FirstWorker, l.Workers, l.Keys, val)
	case LoadPut:
		op = func(ctx context.Context, w, seq int) error {
			key := "bench/put/" + strconv.Itoa(l.FirstWorker+w) + "/" + strconv.Itoa(seq%putKeysPerWorker)
			return m.Put(ctx, key, val)
		}
	case LoadGetLinearizable, LoadGetSerializable:
		serializable := l.Kind == LoadGetSerializable
		op = func(ctx context.Context, _, _ int) error {
			return m.Get(ctx, getKey(rand.IntN(l.Keys)), serializable)
		}
	case LoadLockContended, LoadLockUncontended:
		sessions := make([]cell.Session, l.Workers)
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
			defer cancel()
			for _, s := range sessions {
				if s != nil {
					s.Close(cctx)
				}
			}
		}()
		for h := range sessions {
			s, err := m.NewSession(ctx, lockSessionTTL)
			if err != nil {
				return nil, fmt.Errorf("lock holder %d's session: %w", l.FirstWorker+h, err)
			}
			sessions[h] = s
		}
		op = func(ctx context.Context, h, _ int) error {
			name := "bench"
			if l.Kind == LoadLockUncontended {
				name = "bench-" + strconv.Itoa(l.FirstWorker+h)
			}
			mu := sessions[h].NewMutex(name)
			if err := mu.Lock(ctx); err != nil {
				return err
			}
			return mu.Unlock(ctx)
		}
	default:
		return nil, fmt.Errorf("member load: unknown kind %q", l.Kind)
	}
	res, err := runLoad(ctx, l.Workers, l.Warmup, l.Duration, op)
	out := &MemberLoadResult{Ops: res.ops, Errors: res.errs, Done: res.done,
		ElapsedSeconds: res.elapsed.Seconds(), Latency: *res.lat, CPUSeconds: res.cpu.Seconds()}
	if l, ok := m.(cell.Leads); ok {
		out.Leader = l.Leads()
	}
	if res.firstErr != nil {
		out.FirstError = res.firstErr.Error()
	}
	return out, err
}

// preloadMember writes this process's share of the n get keys: for the
// preload, MemberLoad.FirstWorker is the process's number and Workers
// the number of processes, so the process writes the keys i with
// i%stride == first.
func preloadMember(ctx context.Context, m cell.Member, first, stride, n int, val []byte) error {
	if stride < 1 {
		return errors.New("member load: preload stride under 1")
	}
	const writers = 16
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := first + w*stride; i < n && errs[w] == nil; i += writers * stride {
				errs[w] = m.Put(ctx, getKey(i), val)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("preload %d keys: %w", n, err)
	}
	return nil
}
