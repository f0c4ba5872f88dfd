package scenario

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// Every kind of member load runs on a member and counts its operations;
// the preload writes exactly this process's share of the keys; lock
// sessions are closed; bad loads are refused.
func TestRunMemberLoad(t *testing.T) {
	ctx := context.Background()
	base := MemberLoad{Workers: 2, FirstWorker: 4, Warmup: time.Millisecond, Duration: 20 * time.Millisecond, ValueSize: 8, Keys: 30}
	for _, kind := range []string{LoadPut, LoadGetLinearizable, LoadGetSerializable, LoadLockContended, LoadLockUncontended} {
		m := &countingMember{keys: map[string]int{}}
		l := base
		l.Kind = kind
		res, err := RunMemberLoad(ctx, m, l)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if res.Ops == 0 || res.Errors != 0 || res.Latency.Count() != uint64(res.Ops) || res.ElapsedSeconds <= 0 {
			t.Errorf("%s: %+v", kind, res)
		}
		if m.sessions != 0 {
			t.Errorf("%s: %d sessions left open", kind, m.sessions)
		}
	}
	m := &countingMember{keys: map[string]int{}}
	pre := base
	pre.Kind, pre.Workers, pre.FirstWorker = LoadPreload, 3, 1
	if _, err := RunMemberLoad(ctx, m, pre); err != nil {
		t.Fatal(err)
	}
	if len(m.keys) != 10 || m.keys[getKey(1)] != 1 || m.keys[getKey(28)] != 1 || m.keys[getKey(0)] != 0 {
		t.Errorf("preload of process 1 of 3 wrote %v", m.keys)
	}
	for _, bad := range []MemberLoad{{Kind: "nope"}, {Kind: LoadPut, Workers: -1}, {Kind: LoadGetLinearizable},
		{Kind: LoadPut, ValueSize: 1 << 30}, {Kind: LoadPut, Duration: 2 * time.Hour}} {
		if _, err := RunMemberLoad(ctx, m, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// countingMember is an in-memory cell.Member that records its puts and
// open sessions.
type countingMember struct {
	mu       sync.Mutex
	keys     map[string]int
	sessions int
}

func (m *countingMember) Side() string { return "fake" }
func (m *countingMember) Put(_ context.Context, key string, _ []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[key]++
	return nil
}
func (m *countingMember) Get(context.Context, string, bool) error           { return nil }
func (m *countingMember) Watch(context.Context, string, func(string)) error { return nil }
func (m *countingMember) Close() error                                      { return nil }
func (m *countingMember) NewSession(context.Context, time.Duration) (cell.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessions++
	return &countingSession{m: m}, nil
}

type countingSession struct{ m *countingMember }

func (s *countingSession) NewMutex(string) cell.Mutex       { return nopMutex{} }
func (s *countingSession) NewElection(string) cell.Election { return nil }
func (s *countingSession) Expired() bool                    { return false }
func (s *countingSession) Orphan()                          {}
func (s *countingSession) Close(context.Context) error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.m.sessions--
	return nil
}

type nopMutex struct{}

func (nopMutex) Lock(context.Context) error   { return nil }
func (nopMutex) Unlock(context.Context) error { return nil }
