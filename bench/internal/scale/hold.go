package scale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// HoldConfig sizes the sessions and watches the parent holds through
// clients: Clients clients, client i on member i%3 (dial's business),
// holding Sessions sessions of TTL and Watches watches between them, each
// watch of a prefix of its own (scale/watch/<client>/<n>/, so a coord
// client merges none of them). Workers creators run at once, spread
// over the clients; creation stops after CreateLimit. Probes of the
// watches are read, and a put under each tells whether the watches
// still deliver.
type HoldConfig struct {
	Clients     int
	Sessions    int
	Watches     int
	TTL         time.Duration
	Workers     int
	CreateLimit time.Duration
	Probes      int
}

// Held is the clients, their sessions and watches.
type Held struct {
	cfg      HoldConfig
	clients  []cell.Client
	sessions []cell.Session
	// owner is the client of each of sessions, by index.
	owner  []int
	cancel context.CancelFunc // ends the watches

	// SessionsSeconds and WatchesSeconds are how long the creations
	// took; the errors are the first failures, with their counts.
	SessionsSeconds, WatchesSeconds float64
	SessionsFailed, WatchesFailed   int
	SessionError, WatchError        string
	WatchesHeld                     int

	probes []probe
}

// probe is a watch that is read: a put under its prefix is timed to its
// event.
type probe struct {
	client int
	prefix string
	got    chan time.Time
}

// WatchPrefix is the prefix of watch n of client c.
func WatchPrefix(c, n int) string { return fmt.Sprintf("scale/watch/%04d/%07d/", c, n) }

// StartHold connects the clients and creates the sessions, then the
// watches. It fails only when no client connects; failed creations are
// counted. Close ends it all.
func StartHold(ctx context.Context, cfg HoldConfig, dial func(ctx context.Context, i int) (cell.Client, error)) (*Held, error) {
	if cfg.Clients < 1 || cfg.Workers < 1 {
		return nil, errors.New("scale: hold needs clients and workers")
	}
	h := &Held{cfg: cfg, clients: make([]cell.Client, cfg.Clients)}
	errs := make([]error, cfg.Clients)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range cfg.Clients {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, opLimit)
			defer cancel()
			h.clients[i], errs[i] = dial(dctx, i)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		h.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel = cancel

	// Sessions: session j on client j%Clients.
	all := make([]cell.Session, cfg.Sessions)
	h.SessionsSeconds, h.SessionsFailed, h.SessionError = h.each(ctx, cfg.Sessions, func(ctx context.Context, j int) error {
		s, err := h.clients[j%cfg.Clients].NewSession(ctx, cfg.TTL)
		if err == nil {
			all[j] = s
		}
		return err
	})
	for j, s := range all {
		if s != nil {
			h.sessions = append(h.sessions, s)
			h.owner = append(h.owner, j%cfg.Clients)
		}
	}

	// Watches: watch j on client j%Clients, the first Probes read.
	for j := range min(cfg.Probes, cfg.Watches) {
		c := j % cfg.Clients
		h.probes = append(h.probes, probe{client: c, prefix: WatchPrefix(c, j/cfg.Clients), got: make(chan time.Time, 1)})
	}
	var held atomic.Int64
	h.WatchesSeconds, h.WatchesFailed, h.WatchError = h.each(ctx, cfg.Watches, func(ctx context.Context, j int) error {
		c := j % cfg.Clients
		prefix := WatchPrefix(c, j/cfg.Clients)
		var err error
		if j < len(h.probes) {
			p := h.probes[j]
			err = h.clients[c].Watch(wctx, prefix, func(string) {
				select {
				case p.got <- time.Now():
				default:
				}
			})
		} else if wh, ok := h.clients[c].(cell.WatchHolder); ok {
			err = wh.HoldWatch(wctx, prefix)
		} else {
			err = h.clients[c].Watch(wctx, prefix, func(string) {})
		}
		if err == nil {
			held.Add(1)
		}
		return err
	})
	h.WatchesHeld = int(held.Load())
	return h, nil
}

// each runs f for 0..n-1 with cfg.Workers at once, spread so that the
// workers take the clients in turn, and starts none after CreateLimit.
// It returns how long it took, the failures and the first one.
func (h *Held) each(ctx context.Context, n int, f func(ctx context.Context, j int) error) (float64, int, string) {
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CreateLimit)
	defer cancel()
	var next, failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range h.cfg.Workers {
		wg.Go(func() {
			for cctx.Err() == nil {
				j := int(next.Add(1) - 1)
				if j >= n {
					return
				}
				// Under ctx: a creation abandoned at the limit could still
				// commit.
				octx, cancel := context.WithTimeout(ctx, opLimit)
				err := f(octx, j)
				cancel()
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start).Seconds()
	notStarted := max(0, n-int(next.Load()))
	msg, _ := first.Load().(string)
	if notStarted > 0 && msg == "" {
		msg = fmt.Sprintf("%d not started within %v", notStarted, h.cfg.CreateLimit)
	}
	return took, int(failed.Load()) + notStarted, msg
}

// Sessions returns how many sessions were created.
func (h *Held) Sessions() int { return len(h.sessions) }

// Expired counts the sessions that have expired without being closed,
// and the clients that hold at least one of them: sessions lost by a few
// clients (a connection, a client's keep-alives) and sessions lost all
// over the cell (the members) look different.
func (h *Held) Expired() (sessions, clients int) {
	hit := make(map[int]bool)
	for i, s := range h.sessions {
		if s.Expired() {
			sessions++
			hit[h.owner[i]] = true
		}
	}
	return sessions, len(hit)
}

// ProbeResult is how the read watches answered a put each.
type ProbeResult struct {
	Probes    int
	Delivered int
	MaxMs     float64
}

// Probe puts a key under each read watch's prefix, through the watch's
// own client, and waits at most limit for every event.
func (h *Held) Probe(ctx context.Context, limit time.Duration) ProbeResult {
	res := ProbeResult{Probes: len(h.probes)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range h.probes {
		wg.Go(func() {
			start := time.Now()
			pctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			if err := h.clients[p.client].Put(pctx, p.prefix+"probe", []byte("x")); err != nil {
				return
			}
			select {
			case at := <-p.got:
				mu.Lock()
				res.Delivered++
				res.MaxMs = max(res.MaxMs, float64(at.Sub(start))/float64(time.Millisecond))
				mu.Unlock()
			case <-pctx.Done():
			}
		})
	}
	wg.Wait()
	return res
}

// CloseSessions ends every session in the cell (each close is a log
// entry; coord's and etcd's alike), cfg.Workers at a time, and returns
// how many closed and how long it took.
func (h *Held) CloseSessions(ctx context.Context) (closed int, seconds float64) {
	all := h.sessions
	h.sessions, h.owner = nil, nil
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range h.cfg.Workers {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= len(all) {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, opLimit)
				if all[j].Close(cctx) == nil {
					ok.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return int(ok.Load()), time.Since(start).Seconds()
}

// Close ends the watches and closes the clients; sessions not closed
// with CloseSessions are left to expire.
func (h *Held) Close() {
	if h.cancel != nil {
		h.cancel()
	}
	var wg sync.WaitGroup
	for _, cl := range h.clients {
		if cl != nil {
			wg.Go(func() { cl.Close() })
		}
	}
	wg.Wait()
}
