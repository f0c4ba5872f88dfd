package transport

import (
	"sync"
	"sync/atomic"
	"time"
)

// connLimiter caps open inbound connections, in total and per remote IP,
// so a flood of connections costs a bounded number of goroutines,
// buffers and descriptors. It has its own lock: outbound dials never
// wait on it.
type connLimiter struct {
	max, perIP int

	mu    sync.Mutex
	total int
	byIP  map[string]int
	peak  int // most connections open at once; tests read it
}

func newConnLimiter(max, perIP int) *connLimiter {
	return &connLimiter{max: max, perIP: perIP, byIP: make(map[string]int)}
}

// acquire takes a slot for a connection from ip, reporting false when a
// cap is reached.
func (l *connLimiter) acquire(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max || l.byIP[ip] >= l.perIP {
		return false
	}
	l.total++
	l.byIP[ip]++
	l.peak = max(l.peak, l.total)
	return true
}

func (l *connLimiter) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// counts returns the connections open now and the most ever open at once.
func (l *connLimiter) counts() (open, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.peak
}

// byteBudget bounds the bytes held, across all inbound connections, in
// frames being received or waiting to be delivered.
type byteBudget struct {
	limit int64
	used  atomic.Int64
	peak  atomic.Int64 // tests read it
}

// reserve takes n bytes from the budget, reporting false, having taken
// nothing, if that would exceed the limit.
func (b *byteBudget) reserve(n int64) bool {
	used := b.used.Add(n)
	if used > b.limit {
		b.used.Add(-n)
		return false
	}
	for {
		p := b.peak.Load()
		if used <= p || b.peak.CompareAndSwap(p, used) {
			return true
		}
	}
}

func (b *byteBudget) release(n int64) { b.used.Add(-n) }

// logLimiter lets at most burst lines through per interval and counts
// the others, so that a flood of bad connections costs a few log lines,
// not one each, and the lines that do get through say how many were
// suppressed.
type logLimiter struct {
	burst    int
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	start      time.Time // of the current interval
	n          int       // lines let through in it
	suppressed int       // since the last line let through
}

func newLogLimiter(burst int, interval time.Duration) *logLimiter {
	return &logLimiter{burst: burst, interval: interval, now: time.Now}
}

// allow reports whether a line may be logged now and, if so, how many
// were suppressed since the previous one.
func (l *logLimiter) allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.start) >= l.interval {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
