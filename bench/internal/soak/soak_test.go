package soak

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScheduleAtAndDue(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := Schedule{Start: start, Rate: 300}
	if got := s.At(300); !got.Equal(start.Add(time.Second)) {
		t.Errorf("At(300) = %v, want a second after the start", got.Sub(start))
	}
	if got := s.At(1).Sub(start); got != time.Second/300 {
		t.Errorf("At(1) - start = %v", got)
	}
	for _, c := range []struct {
		after time.Duration
		want  int64
	}{{-time.Second, 0}, {0, 1}, {time.Second / 300, 2}, {time.Second/300 - 1, 1}, {time.Second, 301}, {time.Hour, 3600*300 + 1}} {
		if got := s.Due(start.Add(c.after)); got != c.want {
			t.Errorf("Due(start%+v) = %d, want %d", c.after, got, c.want)
		}
	}
	// Due agrees with At for a rate that does not divide a second.
	s = Schedule{Start: start, Rate: 20.0 / 3}
	for k := range int64(1000) {
		if got := s.Due(s.At(k)); got != k+1 {
			t.Fatalf("rate 20/3: Due(At(%d)) = %d", k, got)
		}
	}
}

// A schedule that falls behind fires every operation, each with its own
// due time, in order: none is skipped and none is stamped late.
func TestScheduleRunCatchesUp(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := Schedule{Start: start, Rate: 100}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waited []time.Time
	var fired []time.Time
	s.run(ctx, func(_ context.Context, t time.Time) bool {
		waited = append(waited, t)
		return true
	}, func(due time.Time) {
		fired = append(fired, due)
		if len(fired) == 50 {
			cancel()
		}
	})
	if len(fired) != 50 {
		t.Fatalf("%d fired, want 50", len(fired))
	}
	for k, due := range fired {
		if !due.Equal(s.At(int64(k))) || !waited[k].Equal(due) {
			t.Fatalf("operation %d due %v, waited for %v, want %v", k, due, waited[k], s.At(int64(k)))
		}
	}
	// A wait that reports the end stops the schedule before firing.
	n := 0
	s.run(context.Background(), func(context.Context, time.Time) bool { return false }, func(time.Time) { n++ })
	if n != 0 {
		t.Errorf("%d fired after the wait ended", n)
	}
}

// Each interval holds only what completed since the previous swap, with
// latencies from the due time, errors counted by kind.
func TestRecorderIntervals(t *testing.T) {
	r := newRecorder()
	now := time.Now()
	r.done(kindPut, now.Add(-50*time.Millisecond), nil)
	r.done(kindPut, now.Add(-10*time.Millisecond), nil)
	r.done(kindLock, now.Add(-20*time.Millisecond), nil)
	r.done(kindSession, now, errors.New("boom"))
	r.watchEvent()
	first := r.swap()
	if first.Put.Count() != 2 || first.Lock.Count() != 1 || first.Session.Count() != 0 ||
		first.SessionErrors != 1 || first.Errors() != 1 || first.FirstError != "boom" || first.WatchEvents != 1 {
		t.Fatalf("first interval: %+v", first)
	}
	if first.Put.Max() < 50*time.Millisecond || first.Put.Quantile(50) < 10*time.Millisecond {
		t.Errorf("put latencies not from the due time: p50 %v max %v", first.Put.Quantile(50), first.Put.Max())
	}
	r.done(kindPut, time.Now(), nil)
	second := r.swap()
	if second.Put.Count() != 1 || second.Errors() != 0 || second.Put.Max() >= 50*time.Millisecond {
		t.Errorf("second interval carries the first: %+v", second)
	}
	b, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	var back Interval
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	back.Merge(second)
	if back.Put.Count() != 3 || back.SessionErrors != 1 || back.FirstError != "boom" {
		t.Errorf("merged: %+v", back)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{PutRate: 100, Keys: 10, LockRate: 5, LockNames: 2, LockSessions: 2, SessionTTL: 10 * time.Second}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"negative rate": func(c *Config) { c.PutRate = -1 },
		"no keys":       func(c *Config) { c.Keys = 0 },
		"no lock names": func(c *Config) { c.LockNames = 0 },
		"huge value":    func(c *Config) { c.ValueSize = 1 << 30 },
		"short ttl":     func(c *Config) { c.SessionTTL = time.Millisecond },
	} {
		c := good
		mod(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// The load runs every kind of operation on the member, reports them and
// stops leaving nothing behind (goleak), its lock sessions closed.
func TestLoadOnFakeMember(t *testing.T) {
	m := &fakeMember{}
	s := NewService(m)
	ctx := context.Background()
	cfg := Config{PutRate: 500, SessionRate: 200, LockRate: 200, Keys: 10, ValueSize: 8, Watchers: 2,
		LockNames: 2, LockSessions: 2, SessionTTL: 10 * time.Second, Seed: 1}
	body, _ := json.Marshal(cfg)
	if _, err := s.Handle(ctx, OpStart, body); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Handle(ctx, OpStart, body); err == nil {
		t.Error("started twice")
	}
	var total Interval
	deadline := time.Now().Add(time.Minute)
	for total.Put.Count() < 20 || total.Lock.Count() < 5 || total.Session.Count() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("load did not run: %+v", total)
		}
		iv, err := s.Handle(ctx, OpReport, nil)
		if err != nil {
			t.Fatal(err)
		}
		total.Merge(iv.(*Interval))
		time.Sleep(10 * time.Millisecond) // polling a condition, not a synchronisation
	}
	iv, err := s.Handle(ctx, OpStop, nil)
	if err != nil {
		t.Fatal(err)
	}
	total.Merge(iv.(*Interval))
	if total.Errors() != 0 || m.watches.Load() != 2 {
		t.Errorf("errors %d (%s), watches %d", total.Errors(), total.FirstError, m.watches.Load())
	}
	if open := m.openSessions.Load(); open != 0 {
		t.Errorf("%d sessions left open", open)
	}
	if _, err := s.Handle(ctx, OpReport, nil); err == nil {
		t.Error("report after stop accepted")
	}
	if _, err := s.Handle(ctx, "nope", nil); err == nil {
		t.Error("unknown operation accepted")
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

// fakeMember is an in-memory cell.Member: every operation succeeds.
type fakeMember struct {
	watches      atomic.Int32
	openSessions atomic.Int32
}

func (f *fakeMember) Side() string                                      { return "fake" }
func (f *fakeMember) Put(context.Context, string, []byte) error         { return nil }
func (f *fakeMember) Get(context.Context, string, bool) error           { return nil }
func (f *fakeMember) Watch(context.Context, string, func(string)) error { f.watches.Add(1); return nil }
func (f *fakeMember) Close() error                                      { return nil }
func (f *fakeMember) NewSession(context.Context, time.Duration) (cell.Session, error) {
	f.openSessions.Add(1)
	return &fakeSession{f: f}, nil
}

type fakeSession struct{ f *fakeMember }

func (s *fakeSession) NewMutex(string) cell.Mutex       { return fakeMutex{} }
func (s *fakeSession) NewElection(string) cell.Election { return nil }
func (s *fakeSession) Expired() bool                    { return false }
func (s *fakeSession) Orphan()                          {}
func (s *fakeSession) Close(context.Context) error      { s.f.openSessions.Add(-1); return nil }

type fakeMutex struct{}

func (fakeMutex) Lock(context.Context) error   { return nil }
func (fakeMutex) Unlock(context.Context) error { return nil }
