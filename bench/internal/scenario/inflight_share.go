package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// The inflight scenario with one member per process (-shape procs): the
// parent picks the leader's process, asks the two others for an
// InflightShare each, and at StopAt kills the leader's process (kill -9)
// or closes its member. Each survivor's writers stop starting writes at
// StopAt and it probes for the first write after it; the parent, which
// knows when it really stopped the leader, does the accounting. Times
// cross processes as Unix nanoseconds: the processes share the machine's
// clock.

// InflightShare is one survivor process's part of an in-flight round.
type InflightShare struct {
	// Writers write through this process's member from when the request
	// arrives until HaltGrace after StopAt (Unix ns), when the parent
	// stops the leader: the grace covers the parent's delay in doing so,
	// so the writers still have their writes in flight when it does.
	// Process numbers their keys apart from the other survivor's.
	Writers   int           `json:"writers"`
	Process   int           `json:"process"`
	ValueSize int           `json:"value_size"`
	StopAt    int64         `json:"stop_at"`
	HaltGrace time.Duration `json:"halt_grace"`
	// ProbeOffset and ProbeEvery place this process's write attempts
	// after StopAt: one at StopAt+ProbeOffset, then every ProbeEvery
	// (the survivors interleave theirs). They go on until one that
	// started ProbeGuard or more after StopAt succeeds, so a stop a little
	// later than StopAt still has a first write after it.
	ProbeOffset time.Duration `json:"probe_offset"`
	ProbeEvery  time.Duration `json:"probe_every"`
	ProbeGuard  time.Duration `json:"probe_guard"`
}

// InflightWrite is one write, its start and end in Unix ns, and its error
// class ("" when it succeeded).
type InflightWrite struct {
	Start int64           `json:"start"`
	End   int64           `json:"end"`
	Class cell.ErrorClass `json:"class,omitempty"`
}

// InflightShareResult is what a survivor's share did.
type InflightShareResult struct {
	// Writes are each writer's writes that ended HaltGrace before StopAt
	// or later, and at least its last two: among them, the one it had in
	// flight at the stop, if it had one.
	Writes []InflightWrite `json:"writes"`
	// Probes are the write attempts after StopAt that succeeded.
	Probes []InflightWrite `json:"probes"`
	// LeadAt is when this process's member was first seen to lead after
	// StopAt (0: it did not, or cannot say).
	LeadAt int64 `json:"lead_at,omitempty"`
}

// validate checks a share from the parent.
func (s InflightShare) validate(now time.Time) error {
	switch {
	case s.Writers < 1 || s.Writers > 10_000 || s.Process < 0 || s.Process > 100:
		return fmt.Errorf("inflight share: %d writers in process %d", s.Writers, s.Process)
	case s.ValueSize < 0 || s.ValueSize > 1<<20:
		return errors.New("inflight share: value size out of range")
	case s.StopAt < now.Add(-time.Second).UnixNano() || s.StopAt > now.Add(time.Minute).UnixNano():
		return errors.New("inflight share: stop time out of range")
	case s.ProbeEvery < time.Millisecond || s.ProbeEvery > time.Second || s.ProbeOffset < 0 || s.ProbeOffset > time.Second ||
		s.ProbeGuard < 0 || s.ProbeGuard > failoverLimit || s.HaltGrace < 0 || s.HaltGrace > time.Second:
		return errors.New("inflight share: probe timing out of range")
	}
	return nil
}

// RunInflightShare runs s on m, a survivor of the leader's stop.
func RunInflightShare(ctx context.Context, m cell.Member, s InflightShare) (*InflightShareResult, error) {
	if err := s.validate(time.Now()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, failoverLimit+inflightLimit)
	defer cancel()
	val := value(s.ValueSize)
	stopAt := time.Unix(0, s.StopAt)
	ws := startWriters(ctx, s.Writers, stopAt.Add(-s.HaltGrace), func(ctx context.Context, w, seq int) error {
		return m.Put(ctx, inflightKey(s.Process, w, seq), val)
	}, func(ctx context.Context, err error) cell.ErrorClass { return cell.Classify(ctx, m, err) })
	sleep(ctx, time.Until(stopAt.Add(s.HaltGrace)))
	ws.halt()
	out := &InflightShareResult{}
	// Seen to lead: polled until the probes are done, by when a leader
	// has committed a write (this member, or the other survivor).
	lctx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	var wg sync.WaitGroup
	if l, ok := m.(cell.Leads); ok {
		wg.Go(func() {
			t := time.NewTicker(failoverPoll)
			defer t.Stop()
			for !l.Leads() {
				select {
				case <-lctx.Done():
					return
				case <-t.C:
				}
			}
			out.LeadAt = time.Now().UnixNano()
		})
	}
	probes := probe(ctx, m, s, stopAt)
	for _, r := range ws.wait() {
		out.Writes = append(out.Writes, InflightWrite{Start: r.start.UnixNano(), End: r.end.UnixNano(), Class: r.class})
	}
	stopPolling()
	wg.Wait()
	out.Probes = probes
	return out, ctx.Err()
}

// probe starts a write attempt at stopAt+ProbeOffset and every ProbeEvery
// after, overlapping, until one that started ProbeGuard or more after
// stopAt succeeds, and returns the attempts that succeeded.
func probe(ctx context.Context, m cell.Member, s InflightShare, stopAt time.Time) []InflightWrite {
	guard := stopAt.Add(s.ProbeGuard)
	actx, stopAttempts := context.WithCancel(ctx)
	defer stopAttempts()
	var mu sync.Mutex
	var ok []InflightWrite
	done := make(chan struct{})
	var once sync.Once
	var attempts sync.WaitGroup
	sleep(ctx, time.Until(stopAt.Add(s.ProbeOffset)))
	t := time.NewTicker(s.ProbeEvery)
	defer t.Stop()
	for i, more := 0, true; more; i++ {
		attempts.Go(func() {
			start := time.Now()
			err := m.Put(actx, "bench/failover/"+strconv.Itoa(s.Process)+"/"+strconv.Itoa(i), []byte("x"))
			if err != nil {
				return
			}
			end := time.Now()
			mu.Lock()
			ok = append(ok, InflightWrite{Start: start.UnixNano(), End: end.UnixNano()})
			mu.Unlock()
			if !start.Before(guard) {
				once.Do(func() { close(done) })
			}
		})
		select {
		case <-done:
			more = false
		case <-ctx.Done():
			more = false
		case <-t.C:
		}
	}
	stopAttempts()
	attempts.Wait()
	return ok
}

// InflightFromShares does the accounting of one cell's in-flight round
// with one member per process: the survivors' writes in flight at t0,
// when the parent stopped the leader, the first probe started at or after
// t0 to succeed, and the first survivor seen to lead.
func InflightFromShares(t0 time.Time, shares []*InflightShareResult) (InflightCell, error) {
	var recs []writeRecord
	var first, lead time.Time
	for _, s := range shares {
		for _, w := range s.Writes {
			recs = append(recs, writeRecord{start: time.Unix(0, w.Start), end: time.Unix(0, w.End), class: w.Class})
		}
		for _, p := range s.Probes {
			if start, end := time.Unix(0, p.Start), time.Unix(0, p.End); !start.Before(t0) && (first.IsZero() || end.Before(first)) {
				first = end
			}
		}
		if at := time.Unix(0, s.LeadAt); s.LeadAt != 0 && (lead.IsZero() || at.Before(lead)) {
			lead = at
		}
	}
	t0 = time.Unix(0, t0.UnixNano()) // the wall clock, as the survivors' times
	res := accountInflight(t0, recs)
	if first.IsZero() {
		return res, errors.New("no write started after the stop succeeded")
	}
	res.Write = first.Sub(t0)
	if !lead.IsZero() {
		res.Lead = max(lead.Sub(t0), time.Nanosecond) // led before the stop was seen: as good as at once
	}
	return res, nil
}
