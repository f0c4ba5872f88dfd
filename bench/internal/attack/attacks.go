package attack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/internal/clientwire"
)

// chunk is the value size the prefixes the reads scan are written in.
const chunk = 64 << 10

// preload writes what the attacks read: TxnKeys small keys, and the two
// prefixes of the prefix reads, through the bench's own writer.
func (r *runner) preload(ctx context.Context) error {
	t0 := time.Now()
	const perTxn = 100
	val := make([]byte, r.cfg.TxnValue)
	var g errGroup
	sem := make(chan struct{}, 4)
	for first := 0; first < r.cfg.TxnKeys; first += perTxn {
		sem <- struct{}{}
		g.Go(func() error {
			defer func() { <-sem }()
			t := r.writer.Txn(ctx)
			for k := first; k < min(first+perTxn, r.cfg.TxnKeys); k++ {
				t.Then(coord.OpPut(fmt.Sprintf("%sk%06d", txnPrefix, k), val))
			}
			_, err := t.Commit()
			return err
		})
	}
	for _, p := range []struct {
		prefix string
		bytes  int
	}{{bigPrefix, r.cfg.ReadPrefixBytes}, {fitPrefix, r.cfg.FitPrefixBytes}} {
		v := make([]byte, min(chunk, p.bytes))
		for i := range (p.bytes + len(v) - 1) / len(v) {
			sem <- struct{}{}
			g.Go(func() error {
				defer func() { <-sem }()
				_, err := r.writer.Put(ctx, fmt.Sprintf("%sv%04d", p.prefix, i), v)
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	r.logf("preload: %d keys of %d B, prefixes of %d and %d KiB, in %.1fs", r.cfg.TxnKeys, r.cfg.TxnValue,
		r.cfg.ReadPrefixBytes>>10, r.cfg.FitPrefixBytes>>10, time.Since(t0).Seconds())
	return nil
}

// connFlood holds cfg.Conns silent TCP connections on the victim's door
// for cfg.ConnHold, each dialled again as soon as the member drops it,
// while an honest client connects every cfg.ProbeEvery.
func (r *runner) connFlood(ctx context.Context) ([]Figure, error) {
	addr := r.addrs[r.victim]
	end := time.Now().Add(r.cfg.ConnHold)
	var open, openPeak, dials, dialErrs, dropped atomic.Int64
	var wg sync.WaitGroup
	for range r.cfg.Conns {
		wg.Go(func() {
			var d net.Dialer
			for time.Now().Before(end) && ctx.Err() == nil {
				dctx, cancel := context.WithDeadline(ctx, end)
				c, err := d.DialContext(dctx, "tcp", addr)
				cancel()
				dials.Add(1)
				if err != nil {
					dialErrs.Add(1)
					sleep(ctx, 50*time.Millisecond)
					continue
				}
				n := open.Add(1)
				for p := openPeak.Load(); n > p && !openPeak.CompareAndSwap(p, n); p = openPeak.Load() {
				}
				c.SetReadDeadline(end)
				_, err = c.Read(make([]byte, 1))
				open.Add(-1)
				c.Close()
				if errClosedByPeer(err) {
					dropped.Add(1)
				}
			}
		})
	}
	// The probes: honest clients connecting as the flood runs, one from
	// the flood's own address (it shares the flood's bound) and one from
	// another (127.0.0.2: another host, as the member sees it).
	probes := make([]probeLog, 2)
	var pwg sync.WaitGroup
	sleep(ctx, min(time.Second, r.cfg.ConnHold/4)) // the flood is up
	for time.Until(end) > 0 && ctx.Err() == nil {
		for i, from := range []string{"", otherHost} {
			pwg.Go(func() { probes[i].probe(ctx, addr, from) })
		}
		sleep(ctx, r.cfg.ProbeEvery)
	}
	openAtEnd := open.Load()
	wg.Wait()
	pwg.Wait()
	figs := []Figure{
		{"conns_open_peak", "connections open at once, at most", "conns", float64(openPeak.Load())},
		{"conns_open_end", "connections open at the end", "conns", float64(openAtEnd)},
		{"dials", "dials (the first ones and the re-dials)", "dials", float64(dials.Load())},
		{"dial_errors", "dials that failed", "dials", float64(dialErrs.Load())},
		{"dropped", "connections the member dropped", "conns", float64(dropped.Load())},
	}
	figs = append(figs, probes[0].figures("probe_same", "honest connects from the flood's address")...)
	return append(figs, probes[1].figures("probe_other", "honest connects from another address")...), nil
}

// otherHost is a loopback address other than the flood's: the member
// sees a client from it as from another host.
const otherHost = "127.0.0.2"

// probeLog is a probe's connects: how long each that succeeded took,
// and how many failed.
type probeLog struct {
	mu    sync.Mutex
	ok    []time.Duration
	fails int
}

// probe connects an honest client to addr from the local IP from, and
// closes it.
func (p *probeLog) probe(ctx context.Context, addr, from string) {
	t0 := time.Now()
	c, err := connectFrom(ctx, "bench-probe", addr, from)
	d := time.Since(t0)
	if err == nil {
		c.Close()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.fails++
	} else {
		p.ok = append(p.ok, d)
	}
}

func (p *probeLog) figures(name, label string) []Figure {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := slices.Clone(p.ok)
	slices.Sort(ok)
	figs := []Figure{
		{name + ".connects", label, "calls", float64(len(ok) + p.fails)},
		{name + ".ok", label + " that succeeded", "calls", float64(len(ok))},
	}
	if len(ok) > 0 {
		figs = append(figs,
			Figure{name + ".p50", label + ": p50", "ms", ms(ok[len(ok)/2])},
			Figure{name + ".max", label + ": max", "ms", ms(ok[len(ok)-1])})
	}
	return figs
}

// unreadWatches opens cfg.Watches watches on one connection, reads their
// acknowledgements, then reads nothing while cfg.WatchPuts values of
// cfg.WatchValue bytes are put under their prefix; after cfg.Hold it
// reads what the member kept for it, to see how the watches ended.
func (r *runner) unreadWatches(ctx context.Context) ([]Figure, error) {
	rc, err := dialRaw(ctx, r.addrs[r.victim], "reader-watch")
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	for i := range r.cfg.Watches {
		if _, err := rc.request(&clientwire.WatchStart{WatchID: uint64(i + 1), Prefix: watchPrefix}); err != nil {
			return nil, err
		}
	}
	var started, refused int
	for started+refused < r.cfg.Watches {
		m, _, err := rc.read(handshakeLimit)
		if err != nil {
			return nil, fmt.Errorf("watch %d's answer: %w", started+refused+1, err)
		}
		switch m.(type) {
		case *clientwire.OK:
			started++
		case *clientwire.ErrorMsg:
			refused++
		}
	}
	// From here the attacker reads nothing.
	var lat []time.Duration
	var puts counts
	v := make([]byte, r.cfg.WatchValue)
	for i := range r.cfg.WatchPuts {
		t0 := time.Now()
		pctx, cancel := context.WithTimeout(ctx, controlPutLimit)
		_, err := r.writer.Put(pctx, fmt.Sprintf("%sv%04d", watchPrefix, i), v)
		cancel()
		lat = append(lat, time.Since(t0))
		puts.add(errClass(err))
	}
	sleep(ctx, r.cfg.Hold)
	frames, code := drain(rc, 5*time.Second)
	slices.Sort(lat)
	figs := []Figure{
		{"watches", "watches started", "watches", float64(started)},
		{"watches_refused", "watches refused", "watches", float64(refused)},
		{"put_max", "writer's put max", "ms", ms(lat[len(lat)-1])},
	}
	figs = append(figs, puts.figures("puts", "writer's puts")...)
	figs = append(figs, frames.figures("frames", "frames the member kept for the attacker")...)
	return append(figs, Figure{"cut", "the member cut the connection (1) or kept it (0)", "", code}), nil
}

// drain reads what the member sends on rc for at most d, or until it
// sent nothing for drainQuiet, counting frames by kind (watch ends and
// errors by code); the figure is 1 if the member closed the connection,
// 0 if it was still open.
const drainQuiet = time.Second

func drain(rc *raw, d time.Duration) (counts, float64) {
	var c counts
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return c, 0
		}
		m, _, err := rc.read(min(left, drainQuiet))
		if err != nil {
			if errClosedByPeer(err) {
				return c, 1
			}
			return c, 0
		}
		switch m := m.(type) {
		case *clientwire.WatchEnd:
			c.add("watch-end-" + codeName(m.Code))
		case *clientwire.ErrorMsg:
			c.add("error-" + codeName(m.Code))
		default:
			c.add(fmt.Sprintf("kind-%d", m.Kind()))
		}
	}
}

// codeName names the protocol's error codes an attack meets.
func codeName(c clientwire.Code) string {
	switch c {
	case clientwire.CodeNone:
		return "none"
	case clientwire.CodeSlowWatcher:
		return "slow-watcher"
	case clientwire.CodeReadTooLarge:
		return "read-too-large"
	case clientwire.CodeTooManyRequests:
		return "too-many-requests"
	case clientwire.CodeTooManyWatchers:
		return "too-many-watchers"
	case clientwire.CodeFrameTooLarge:
		return "frame-too-large"
	case clientwire.CodeProtocol:
		return "protocol"
	}
	return fmt.Sprint(int(c))
}

// prefixReads sends cfg.Reads reads of prefix, reads no reply for
// cfg.Hold, then reads what the member kept.
func (r *runner) prefixReads(ctx context.Context, prefix, name string) ([]Figure, error) {
	rc, err := dialRaw(ctx, r.addrs[r.victim], name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	sent := 0
	rc.c.SetWriteDeadline(time.Now().Add(handshakeLimit))
	for range r.cfg.Reads {
		if _, err := rc.request(&clientwire.Read{Key: prefix, Prefix: true}); err != nil {
			break // the member stopped reading us, or cut us off
		}
		sent++
	}
	sleep(ctx, r.cfg.Hold)
	frames, cut := drain(rc, 5*time.Second)
	figs := []Figure{{"sent", "reads sent", "reads", float64(sent)}}
	figs = append(figs, frames.figures("frames", "frames the member kept for the attacker")...)
	return append(figs, Figure{"cut", "the member cut the connection (1) or kept it (0)", "", cut}), nil
}

// keepAliveFrames sends cfg.KeepAliveFrames keep-alive frames of
// one-byte IDs at once, each on its own connection, as long as the
// member reads (cfg.KeepAliveBytes, at most its frame limit), and waits
// for the member to close each.
func (r *runner) keepAliveFrames(ctx context.Context) ([]Figure, error) {
	var conns []*raw
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range r.cfg.KeepAliveFrames {
		rc, err := dialRaw(ctx, r.addrs[r.victim], fmt.Sprintf("reader-keepalive-%d", i))
		if err != nil {
			return nil, err
		}
		conns = append(conns, rc)
	}
	limit := int(conns[0].welcome.MaxFrame)
	frame := keepAliveFrame(conns[0].version, min(r.cfg.KeepAliveBytes, limit))
	var wrote, closed atomic.Int64
	var closeMax atomic.Int64
	var wg sync.WaitGroup
	for _, rc := range conns {
		wg.Go(func() {
			rc.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := rc.c.Write(frame); err == nil {
				wrote.Add(1)
			}
			t0 := time.Now()
			rc.c.SetReadDeadline(time.Now().Add(handshakeLimit))
			for {
				if _, _, err := readFrame(rc.c, readLimit); err != nil {
					if errClosedByPeer(err) {
						closed.Add(1)
						d := int64(time.Since(t0))
						for p := closeMax.Load(); d > p && !closeMax.CompareAndSwap(p, d); p = closeMax.Load() {
						}
					}
					return
				}
			}
		})
	}
	wg.Wait()
	return []Figure{
		{"frame_bytes", "frame length", "bytes", float64(len(frame) - 4)},
		{"member_frame_limit", "the member's frame limit (Welcome)", "bytes", float64(limit)},
		{"written", "frames written whole", "frames", float64(wrote.Load())},
		{"closed", "connections the member closed", "conns", float64(closed.Load())},
		{"close_max", "frame written to connection closed, max", "ms", ms(time.Duration(closeMax.Load()))},
	}, nil
}

// readTxns commits n transactions of cfg.TxnOps OpGetPrefix("") in a
// row through a client with no write grant.
func (r *runner) readTxns(ctx context.Context, n int) ([]Figure, error) {
	c, err := connect(ctx, "reader-txn", r.addrs[r.victim])
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var res counts
	var worst time.Duration
	for range n {
		tctx, cancel := context.WithTimeout(ctx, time.Minute)
		t := c.Txn(tctx)
		for range r.cfg.TxnOps {
			t.Then(coord.OpGetPrefix(""))
		}
		t0 := time.Now()
		_, err := t.Commit()
		worst = max(worst, time.Since(t0))
		cancel()
		res.add(errClass(err))
	}
	return append(res.figures("txns", "transactions"), Figure{"txn_max", "transaction max", "ms", ms(worst)}), nil
}

// sessions has one identity try cfg.Sessions sessions of cfg.SessionTTL
// (after one of 1,000 hours), then abandons them (its client closes
// without ending them) and measures an idle window.
func (r *runner) sessions(ctx context.Context) ([]Figure, error) {
	c, err := connect(ctx, "reader-sessions", r.addrs[r.victim])
	if err != nil {
		return nil, err
	}
	var long counts
	_, err = c.NewSession(ctx, coord.WithTTL(1000*time.Hour))
	long.add(errClass(err))
	res, secs := createSessions(ctx, []*coord.Client{c}, r.cfg.Sessions, r.cfg.SessionTTL, r.cfg.SessionWorkers)
	c.Close()
	figs := long.figures("ttl_1000h", "a session of 1,000 hours")
	figs = append(figs, res.figures("create", "sessions tried")...)
	figs = append(figs, Figure{"create_rate", "sessions tried per second", "calls/s", float64(r.cfg.Sessions) / secs})
	return r.afterSessions(ctx, figs)
}

// spreadIdentities is how many identities hold n sessions under the
// default per-identity bound.
func spreadIdentities(n int) int {
	return (n + coord.DefaultClientMaxSessions - 1) / coord.DefaultClientMaxSessions
}

// sessionsSpread creates cfg.SpreadSessions sessions over as many
// identities as the per-identity bound needs (what a plaintext attacker,
// or one holding that many credentials, can do), abandons them and
// measures an idle window: what the cell pays for sessions it holds.
func (r *runner) sessionsSpread(ctx context.Context) ([]Figure, error) {
	var cs []*coord.Client
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for i := range spreadIdentities(r.cfg.SpreadSessions) {
		c, err := connect(ctx, fmt.Sprintf("reader-spread-%d", i), r.addrs[r.victim])
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	res, secs := createSessions(ctx, cs, r.cfg.SpreadSessions, r.cfg.SessionTTL, r.cfg.SessionWorkers)
	for _, c := range cs {
		c.Close()
	}
	cs = nil
	figs := res.figures("create", "sessions tried")
	figs = append(figs, Figure{"create_rate", "sessions tried per second", "calls/s", float64(r.cfg.SpreadSessions) / secs})
	return r.afterSessions(ctx, figs)
}

// afterSessions adds an idle window's figures to figs.
func (r *runner) afterSessions(ctx context.Context, figs []Figure) ([]Figure, error) {
	w, err := r.idle(ctx)
	if err != nil {
		return figs, err
	}
	r.logf("idle after the sessions: %s", w)
	for i, c := range w.CPUCores {
		figs = append(figs, Figure{fmt.Sprintf("idle_cpu.m%d", i), fmt.Sprintf("m%d CPU in the idle window after", i), "cores", c})
	}
	return append(figs, Figure{"idle_log_entries", "log entries in the idle window after, beyond the controls' puts", "entries", float64(w.LogEntries)}), nil
}

// createSessions tries n sessions of ttl over clients (attempt i on
// client i%len), workers at once, and counts the outcomes; the sessions
// stay. It returns how long it took.
func createSessions(ctx context.Context, clients []*coord.Client, n int, ttl time.Duration, workers int) (counts, float64) {
	var next atomic.Int64
	var mu sync.Mutex
	var res counts
	t0 := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := clients[i%int64(len(clients))].NewSession(sctx, coord.WithTTL(ttl))
				cancel()
				mu.Lock()
				res.add(errClass(err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res, max(time.Since(t0).Seconds(), 1e-9)
}

// closeStuck asks for cfg.CloseBytes of replies (reads of the fit
// prefix), reads none, half-closes, and then closes the victim's node,
// timed: a client that does not read must not hold Close.
func (r *runner) closeStuck(ctx context.Context) ([]Figure, error) {
	rc, err := dialRaw(ctx, r.addrs[r.victim], "reader-close")
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	n := (r.cfg.CloseBytes + r.cfg.FitPrefixBytes - 1) / r.cfg.FitPrefixBytes
	sent := 0
	rc.c.SetWriteDeadline(time.Now().Add(handshakeLimit))
	for range n {
		if _, err := rc.request(&clientwire.Read{Key: fitPrefix, Prefix: true}); err != nil {
			break
		}
		sent++
	}
	sleep(ctx, r.cfg.Hold)
	if tc, ok := rc.c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	sleep(ctx, r.cfg.Hold)
	d, err := r.targets[r.victim].CloseNode(ctx)
	if err != nil && !errors.Is(err, coord.ErrClosed) {
		return nil, fmt.Errorf("Node.Close: %w", err)
	}
	return []Figure{
		{"sent", "reads sent", "reads", float64(sent)},
		{"asked", "reply bytes asked for", "MiB", mib(int64(sent) * int64(r.cfg.FitPrefixBytes))},
		{"close", "the victim's Node.Close", "ms", ms(d)},
	}, nil
}

// errGroup runs functions and keeps the first error.
type errGroup struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs error
}

func (g *errGroup) Go(f func() error) {
	g.wg.Go(func() {
		if err := f(); err != nil {
			g.mu.Lock()
			g.errs = errors.Join(g.errs, err)
			g.mu.Unlock()
		}
	})
}

func (g *errGroup) Wait() error {
	g.wg.Wait()
	return g.errs
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
