package attack

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/coordcell/coord"
)

// control is an honest client that puts a small value every interval,
// on an open-loop schedule (a stalled put does not delay the next one),
// and remembers when each put committed: the longest gap between
// commits in an attack's window is how long the cell (or the member it
// goes through) stopped serving an honest writer.
type control struct {
	name     string
	c        *coord.Client
	interval time.Duration

	mu      sync.Mutex
	commits []time.Time
	errs    []time.Time

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// controlPutLimit bounds one control put: past it the put counts as an
// error, and the gap goes on until a later one commits.
const controlPutLimit = 10 * time.Second

// maxControlInFlight bounds the control's puts in flight, so a stall
// costs the bench nothing unbounded either.
const maxControlInFlight = 256

// startControl connects name to addr and starts putting.
func startControl(ctx context.Context, name, addr string, interval time.Duration) (*control, error) {
	c, err := connect(ctx, name, addr)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	ct := &control{name: name, c: c, interval: interval, cancel: cancel}
	ct.wg.Go(func() { ct.run(cctx) })
	return ct, nil
}

func (ct *control) run(ctx context.Context) {
	t := time.NewTicker(ct.interval)
	defer t.Stop()
	sem := make(chan struct{}, maxControlInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // as many in flight as it allows: this one is skipped, the gap shows it
		}
		wg.Go(func() {
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, controlPutLimit)
			_, err := ct.c.Put(pctx, fmt.Sprintf("bench/control/%s/%d", ct.name, i%64), []byte("x"))
			cancel()
			now := time.Now()
			if ctx.Err() != nil {
				return
			}
			ct.mu.Lock()
			if err != nil {
				ct.errs = append(ct.errs, now)
			} else {
				ct.commits = append(ct.commits, now)
			}
			ct.mu.Unlock()
		})
	}
}

// window returns the longest gap between commits in [from, to] (the
// window's edges count as commits, so a window without one has a gap of
// its whole length), the commits in it and the errors.
func (ct *control) window(from, to time.Time) (gap time.Duration, commits, errs int) {
	ct.mu.Lock()
	cs := slices.Clone(ct.commits)
	es := slices.Clone(ct.errs)
	ct.mu.Unlock()
	gap, commits = longestGap(cs, from, to)
	for _, e := range es {
		if !e.Before(from) && !e.After(to) {
			errs++
		}
	}
	return gap, commits, errs
}

// longestGap is the longest time in [from, to] without one of the
// times ts (in any order), and how many of ts fall in it.
func longestGap(ts []time.Time, from, to time.Time) (time.Duration, int) {
	var in []time.Time
	for _, t := range ts {
		if !t.Before(from) && !t.After(to) {
			in = append(in, t)
		}
	}
	slices.SortFunc(in, func(a, b time.Time) int { return a.Compare(b) })
	prev, gap := from, time.Duration(0)
	for _, t := range in {
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return max(gap, to.Sub(prev)), len(in)
}

// stop stops putting and closes the client.
func (ct *control) stop() {
	ct.cancel()
	ct.wg.Wait()
	ct.c.Close()
}

// connect connects a client called name to addr alone (plaintext: the
// name is its identity), within handshakeLimit.
func connect(ctx context.Context, name, addr string) (*coord.Client, error) {
	return connectFrom(ctx, name, addr, "")
}

// connectFrom is connect from the local IP address from ("": any): a
// client on another host, as the member sees it, when from is another
// loopback address (127.0.0.2).
func connectFrom(ctx context.Context, name, addr, from string) (*coord.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, handshakeLimit)
	defer cancel()
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	c, err := coord.Connect(ctx, coord.ClientConfig{Name: name, Members: []string{addr}, Logger: quiet, Dial: dial})
	if err != nil {
		return nil, fmt.Errorf("client %s to %s: %w", name, addr, err)
	}
	return c, nil
}
