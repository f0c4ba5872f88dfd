package soak

import (
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/hist"
)

// Interval is what one process's load did over one report interval.
type Interval struct {
	// Put, Lock and Session hold the latencies of the puts, the lock
	// cycles (Lock then Unlock) and the session cycles (create then
	// close) that completed, each from its due time.
	Put     hist.Histogram `json:"put"`
	Lock    hist.Histogram `json:"lock"`
	Session hist.Histogram `json:"session"`
	// Errors counts the operations that failed, by kind, and FirstError
	// is the first failure's message.
	PutErrors     uint64 `json:"put_errors"`
	LockErrors    uint64 `json:"lock_errors"`
	SessionErrors uint64 `json:"session_errors"`
	FirstError    string `json:"first_error,omitempty"`
	// WatchEvents counts the events the process's watchers received.
	WatchEvents uint64 `json:"watch_events"`
	// SegmentsStarted and SegmentsInline are the member's log segments
	// started since it opened and, of them, those filled on the append
	// path (cell.SegmentCounter), -1 where the side does not count them.
	// They are the process's totals, not the interval's: Merge leaves
	// them alone.
	SegmentsStarted int64 `json:"segments_started"`
	SegmentsInline  int64 `json:"segments_filled_inline"`
}

// Errors returns the failures of every kind.
func (iv *Interval) Errors() uint64 { return iv.PutErrors + iv.LockErrors + iv.SessionErrors }

// Merge adds o to iv (another process's, or a later interval).
func (iv *Interval) Merge(o *Interval) {
	iv.Put.Merge(&o.Put)
	iv.Lock.Merge(&o.Lock)
	iv.Session.Merge(&o.Session)
	iv.PutErrors += o.PutErrors
	iv.LockErrors += o.LockErrors
	iv.SessionErrors += o.SessionErrors
	if iv.FirstError == "" {
		iv.FirstError = o.FirstError
	}
	iv.WatchEvents += o.WatchEvents
}

// kind is one of the load's operations.
type kind int

const (
	kindPut kind = iota
	kindLock
	kindSession
)

// recorder collects the current Interval; Swap starts the next.
type recorder struct {
	mu  sync.Mutex
	cur *Interval
}

func newRecorder() *recorder { return &recorder{cur: new(Interval)} }

// done records an operation of kind k that was due at due and ended now
// with err.
func (r *recorder) done(k kind, due time.Time, err error) {
	d := time.Since(due)
	r.mu.Lock()
	defer r.mu.Unlock()
	iv := r.cur
	if err != nil {
		switch k {
		case kindPut:
			iv.PutErrors++
		case kindLock:
			iv.LockErrors++
		case kindSession:
			iv.SessionErrors++
		}
		if iv.FirstError == "" {
			iv.FirstError = err.Error()
		}
		return
	}
	switch k {
	case kindPut:
		iv.Put.Add(d)
	case kindLock:
		iv.Lock.Add(d)
	case kindSession:
		iv.Session.Add(d)
	}
}

// watchEvent counts one watch event.
func (r *recorder) watchEvent() {
	r.mu.Lock()
	r.cur.WatchEvents++
	r.mu.Unlock()
}

// swap returns the current Interval and starts an empty one.
func (r *recorder) swap() *Interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	iv := r.cur
	r.cur = new(Interval)
	return iv
}
