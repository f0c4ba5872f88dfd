package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/proc"
)

// The keep-alive intervals of the two sides, for a figure per session per
// interval: coord's members send each session's keep-alive every TTL/4
// (internal/sessions.KeepAliveDivisor), batched into one message per
// member; etcd's clientv3 renews each lease every TTL/3.
const (
	CoordKeepAliveDivisor = 4
	EtcdKeepAliveDivisor  = 3
)

// KeepAliveShare is one member process's part of the keep-alive point
// of the multi-process shape: Sessions sessions created on its member
// by Workers creators, with TTL.
type KeepAliveShare struct {
	Sessions int           `json:"sessions"`
	Workers  int           `json:"workers"`
	TTL      time.Duration `json:"ttl"`
}

// KeepAliveWindow is what one process used over a window: its CPU time
// (user + system) and the window's length; with sessions, how many had
// expired by its end.
type KeepAliveWindow struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	Seconds    float64 `json:"seconds"`
	Expired    int     `json:"expired"`
}

// KeepAliveCreated is how a share's creation went.
type KeepAliveCreated struct {
	Created int     `json:"created"`
	Seconds float64 `json:"seconds"`
}

// KeepAliveHolder holds one process's sessions between the calls of the
// keep-alive point: an idle window, the creation, the measured window.
// The sessions are not closed: the cell is stopped after the point. Its
// methods are safe for concurrent use.
type KeepAliveHolder struct {
	mu       sync.Mutex
	sessions []cell.Session
}

// Window measures this process's CPU over d, and how many of its
// sessions had expired by the end.
func (h *KeepAliveHolder) Window(ctx context.Context, d time.Duration) (KeepAliveWindow, error) {
	if d <= 0 || d > time.Hour {
		return KeepAliveWindow{}, errors.New("keep-alive window out of range")
	}
	cpu0, t0 := proc.CPU(), time.Now()
	sleep(ctx, d)
	if err := ctx.Err(); err != nil {
		return KeepAliveWindow{}, err
	}
	w := KeepAliveWindow{CPUSeconds: (proc.CPU() - cpu0).Seconds(), Seconds: time.Since(t0).Seconds()}
	h.mu.Lock()
	for _, s := range h.sessions {
		if s.Expired() {
			w.Expired++
		}
	}
	h.mu.Unlock()
	return w, nil
}

// Create creates the share's sessions on m.
func (h *KeepAliveHolder) Create(ctx context.Context, m cell.Member, sh KeepAliveShare) (KeepAliveCreated, error) {
	if sh.Sessions < 0 || sh.Sessions > 1_000_000 || sh.Workers < 1 || sh.Workers > 10_000 || sh.TTL <= 0 {
		return KeepAliveCreated{}, errors.New("keep-alive share out of range")
	}
	all := make([]cell.Session, sh.Sessions)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, sh.Workers)
	start := time.Now()
	for w := range sh.Workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= sh.Sessions || ctx.Err() != nil {
					return
				}
				s, err := m.NewSession(ctx, sh.TTL)
				if err != nil {
					errs[w] = fmt.Errorf("session %d: %w", i, err)
					return
				}
				all[i] = s
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	h.mu.Lock()
	for _, s := range all {
		if s != nil {
			h.sessions = append(h.sessions, s)
		}
	}
	n := len(h.sessions)
	h.mu.Unlock()
	return KeepAliveCreated{Created: n, Seconds: took.Seconds()}, errors.Join(errs...)
}
