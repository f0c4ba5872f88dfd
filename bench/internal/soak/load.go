// Package soak is a long steady load on a cell whose members run in
// separate processes: each process's share of puts over a fixed key
// space, sessions created and closed, lock cycles on a few shared names,
// and watchers of the put prefix, every operation on an open-loop
// schedule. The parent asks each process for its Interval at every
// report and merges them.
package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/member"
)

// Config is one process's share of the load.
type Config struct {
	// PutRate, SessionRate and LockRate are operations per second.
	PutRate     float64 `json:"put_rate"`
	SessionRate float64 `json:"session_rate"`
	LockRate    float64 `json:"lock_rate"`
	// Keys is the size of the key space the puts write over (shared by
	// the processes), ValueSize the size of each value.
	Keys      int `json:"keys"`
	ValueSize int `json:"value_size"`
	// Watchers watch the put prefix on this process's member.
	Watchers int `json:"watchers"`
	// LockNames are the locks cycled (shared by the processes, so they
	// contend), LockSessions the sessions this process holds them with:
	// a cycle takes a free one, so a slow cycle delays the next ones.
	LockNames    int `json:"lock_names"`
	LockSessions int `json:"lock_sessions"`
	// SessionTTL is the TTL of every session.
	SessionTTL time.Duration `json:"session_ttl"`
	// Seed seeds the choice of keys and lock names.
	Seed uint64 `json:"seed"`
}

// Prefixes of the load's keys and lock names.
const (
	PutPrefix  = "soak/kv/"
	LockPrefix = "soak/lock/"
)

// opTimeout bounds one operation; maxInFlight bounds the operations of
// one kind in flight, so a stalled cell costs bounded memory: the
// schedule then waits, and the wait shows as latency.
const (
	opTimeout   = 10 * time.Second
	maxInFlight = 1000
)

// validate checks a Config from the parent.
func (c Config) validate() error {
	switch {
	case c.PutRate < 0 || c.SessionRate < 0 || c.LockRate < 0:
		return errors.New("soak: negative rate")
	case c.PutRate > 0 && c.Keys < 1:
		return errors.New("soak: puts need at least one key")
	case c.LockRate > 0 && (c.LockNames < 1 || c.LockSessions < 1):
		return errors.New("soak: lock cycles need a lock name and a session")
	case c.ValueSize < 0 || c.ValueSize > 1<<20, c.Watchers < 0 || c.Watchers > 10_000,
		c.LockSessions > 10_000, c.Keys > 100_000_000:
		return errors.New("soak: size out of range")
	case c.SessionTTL < time.Second:
		return errors.New("soak: session TTL under a second")
	}
	return nil
}

// Load is a running soak load in this process.
type Load struct {
	rec    *recorder
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// sessions are the lock sessions, closed when the load stops.
	sessions []cell.Session
}

// Start starts cfg's load on m. The load runs until Stop.
func Start(ctx context.Context, m cell.Member, cfg Config) (*Load, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{rec: newRecorder(), cancel: cancel}
	for range cfg.Watchers {
		if err := m.Watch(ctx, PutPrefix, func(string) { l.rec.watchEvent() }); err != nil {
			l.Stop()
			return nil, fmt.Errorf("soak: watch: %w", err)
		}
	}
	pool := make(chan cell.Session, cfg.LockSessions)
	if cfg.LockRate > 0 {
		for range cfg.LockSessions {
			s, err := m.NewSession(ctx, cfg.SessionTTL)
			if err != nil {
				l.Stop()
				return nil, fmt.Errorf("soak: lock session: %w", err)
			}
			l.sessions = append(l.sessions, s)
			pool <- s
		}
	}
	val := make([]byte, cfg.ValueSize)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	rngMu := sync.Mutex{}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	pick := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}
	now := time.Now()
	l.schedule(ctx, cfg.PutRate, now, kindPut, func(ctx context.Context) error {
		return m.Put(ctx, PutPrefix+strconv.Itoa(pick(cfg.Keys)), val)
	})
	l.schedule(ctx, cfg.SessionRate, now, kindSession, func(ctx context.Context) error {
		s, err := m.NewSession(ctx, cfg.SessionTTL)
		if err != nil {
			return err
		}
		return s.Close(ctx)
	})
	l.schedule(ctx, cfg.LockRate, now, kindLock, func(ctx context.Context) error {
		var s cell.Session
		select {
		case s = <-pool:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { pool <- s }()
		mu := s.NewMutex(LockPrefix + strconv.Itoa(pick(cfg.LockNames)))
		if err := mu.Lock(ctx); err != nil {
			return err
		}
		return mu.Unlock(ctx)
	})
	return l, nil
}

// schedule runs op at rate from start, each call in its own goroutine
// (at most maxInFlight at once), recording each as kind k.
func (l *Load) schedule(ctx context.Context, rate float64, start time.Time, k kind, op func(ctx context.Context) error) {
	if rate <= 0 {
		return
	}
	sem := make(chan struct{}, maxInFlight)
	l.wg.Go(func() {
		var ops sync.WaitGroup
		defer ops.Wait()
		Schedule{Start: start, Rate: rate}.run(ctx, waitUntil, func(due time.Time) {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			ops.Go(func() {
				defer func() { <-sem }()
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				err := op(octx)
				cancel()
				// An operation cut short by the load's end is not a
				// failure of the cell.
				if ctx.Err() == nil {
					l.rec.done(k, due, err)
				}
			})
		})
	})
}

// Report returns what the load did since the last Report (or Start).
func (l *Load) Report() *Interval { return l.rec.swap() }

// Stop stops the load, waits for the operations in flight, closes the
// lock sessions, and returns what it did since the last Report.
func (l *Load) Stop() (*Interval, error) {
	l.cancel()
	l.wg.Wait()
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, s := range l.sessions {
		errs = append(errs, s.Close(ctx))
	}
	l.sessions = nil
	return l.rec.swap(), errors.Join(errs...)
}

// The operations a Service serves.
const (
	OpStart  = "soak-start"  // body Config; starts the load
	OpReport = "soak-report" // answers the Interval since the last report
	OpStop   = "soak-stop"   // stops the load; answers its last Interval
)

// Service serves the soak operations in a member process.
type Service struct {
	m    cell.Member
	load *Load
}

var _ member.Service = (*Service)(nil)

// NewService returns the soak Service of member m.
func NewService(m cell.Member) *Service { return &Service{m: m} }

// Handle serves one of OpStart, OpReport and OpStop.
func (s *Service) Handle(ctx context.Context, op string, body json.RawMessage) (any, error) {
	switch op {
	case OpStart:
		if s.load != nil {
			return nil, errors.New("soak: already started")
		}
		var cfg Config
		if err := json.Unmarshal(body, &cfg); err != nil {
			return nil, fmt.Errorf("soak: config: %w", err)
		}
		l, err := Start(ctx, s.m, cfg)
		if err != nil {
			return nil, err
		}
		s.load = l
		return nil, nil
	case OpReport, OpStop:
		if s.load == nil {
			return nil, errors.New("soak: not started")
		}
		var iv *Interval
		var err error
		if op == OpReport {
			iv = s.load.Report()
		} else {
			iv, err = s.load.Stop()
			s.load = nil
		}
		iv.SegmentsStarted, iv.SegmentsInline = -1, -1
		if sc, ok := s.m.(cell.SegmentCounter); ok {
			started, inline, cerr := sc.SegmentCuts()
			if cerr != nil {
				return nil, errors.Join(err, fmt.Errorf("soak: segment cuts: %w", cerr))
			}
			iv.SegmentsStarted, iv.SegmentsInline = started, inline
		}
		return iv, err
	}
	return nil, fmt.Errorf("soak: unknown operation %q", op)
}

// Close stops the load if it runs.
func (s *Service) Close() error {
	if s.load == nil {
		return nil
	}
	_, err := s.load.Stop()
	s.load = nil
	return err
}
