package soak

import (
	"context"
	"time"
)

// Schedule is an open-loop arrival schedule: operation k is due at
// Start + k/Rate, whatever happened to the ones before. Latency measured
// from the due time, not from when the operation could start, includes
// any queueing behind slow ones (no coordinated omission).
type Schedule struct {
	Start time.Time
	// Rate is operations per second; it must be positive.
	Rate float64
}

// At returns when operation k (from 0) is due.
func (s Schedule) At(k int64) time.Time {
	return s.Start.Add(time.Duration(float64(k) * float64(time.Second) / s.Rate))
}

// Due returns how many operations are due by now: the k with At(k) <= now.
func (s Schedule) Due(now time.Time) int64 {
	if now.Before(s.Start) {
		return 0
	}
	k := int64(now.Sub(s.Start).Seconds()*s.Rate) + 1
	// Float rounding can put At(k-1) a nanosecond past now, or At(k) at it.
	for k > 0 && s.At(k-1).After(now) {
		k--
	}
	for !s.At(k).After(now) {
		k++
	}
	return k
}

// run fires every operation of s in order until ctx ends: it waits with
// wait until each is due, then calls fire with its due time. An
// operation already due (the loop fell behind, fire blocked) fires at
// once: none is skipped, so falling behind shows as latency. wait returns
// false when ctx ended.
func (s Schedule) run(ctx context.Context, wait func(ctx context.Context, t time.Time) bool,
	fire func(due time.Time)) {
	for k := int64(0); ctx.Err() == nil; k++ {
		due := s.At(k)
		if !wait(ctx, due) {
			return
		}
		fire(due)
	}
}

// waitUntil sleeps until t or ctx ends; it reports whether t came.
func waitUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
