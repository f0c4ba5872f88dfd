package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordcell/coord"
)

// Target is one member of the cell under attack, seen from the attacker:
// its client address, its figures, and its Close. The member processes
// of -shape procs answer through Service; a test's in-process member is a
// Local.
type Target interface {
	// ClientAddr is the member's client address (Node.ClientAddr).
	ClientAddr(ctx context.Context) (string, error)
	// Mark collects the member process's garbage, forgets its peaks and
	// returns its figures now: the baseline of an attack.
	Mark(ctx context.Context) (Sample, error)
	// Peak returns the member process's highest RSS and heap since Mark,
	// with its counters now.
	Peak(ctx context.Context) (Sample, error)
	// CloseNode closes the member's node and returns how long Close took.
	CloseNode(ctx context.Context) (time.Duration, error)
}

// Local is a Target in this process. Its memory figures are the
// process's, shared by every member in it (a test's cell): right for the
// accounting, not for comparing members.
type Local struct {
	N *coord.Node
	S *Sampler

	mu     sync.Mutex
	closed bool
}

// ClientAddr returns the node's client address.
func (l *Local) ClientAddr(context.Context) (string, error) {
	a := l.N.Admin().ClientAddr()
	if a == "" {
		return "", errors.New("attack: the member serves no clients (Config.ClientAddr)")
	}
	return a, nil
}

// Mark marks the sampler and samples the node.
func (l *Local) Mark(context.Context) (Sample, error) {
	rss, heap := l.S.Mark()
	return nodeSample(l.N, l.isClosed(), rss, heap), nil
}

// Peak reads the sampler's peaks and samples the node.
func (l *Local) Peak(context.Context) (Sample, error) {
	rss, heap := l.S.Peak()
	return nodeSample(l.N, l.isClosed(), rss, heap), nil
}

// CloseNode closes the node, timed.
func (l *Local) CloseNode(context.Context) (time.Duration, error) {
	t0 := time.Now()
	err := l.N.Close()
	d := time.Since(t0)
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return d, err
}

func (l *Local) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// The operations a member process serves for the scenario (Service).
const (
	OpInfo  = "attack-info"
	OpMark  = "attack-mark"
	OpPeak  = "attack-peak"
	OpClose = "attack-close"
)

// Info is OpInfo's answer.
type Info struct {
	ClientAddr string `json:"client_addr"`
}

// Closed is OpClose's answer.
type Closed struct {
	Seconds float64 `json:"seconds"`
}

// Noder is a member that can hand its coord node over (coordcell's).
type Noder interface {
	Node() *coord.Node
}

// Service serves a member process's side of the scenario: its figures
// and its Close. The sampler starts with the first request, so a member
// process of another scenario pays nothing.
type Service struct {
	m     any
	local *Local
}

// NewService returns the service of member m (a Noder, or the operations
// fail).
func NewService(m any) *Service { return &Service{m: m} }

// Handle serves one of the Op* operations.
func (s *Service) Handle(ctx context.Context, op string, _ json.RawMessage) (any, error) {
	if s.local == nil {
		nd, ok := s.m.(Noder)
		if !ok {
			return nil, fmt.Errorf("attack: this side has no client door (%T)", s.m)
		}
		s.local = &Local{N: nd.Node(), S: StartSampler()}
	}
	switch op {
	case OpInfo:
		a, err := s.local.ClientAddr(ctx)
		return Info{ClientAddr: a}, err
	case OpMark:
		return s.local.Mark(ctx)
	case OpPeak:
		return s.local.Peak(ctx)
	case OpClose:
		d, err := s.local.CloseNode(ctx)
		return Closed{Seconds: d.Seconds()}, err
	}
	return nil, errors.New("attack: unknown operation " + op)
}

// Close stops the sampler.
func (s *Service) Close() error {
	if s.local != nil {
		s.local.S.Close()
	}
	return nil
}

// Caller calls a member process (member.Proc.Call's shape, without its
// usage).
type Caller func(ctx context.Context, op string, body, out any) error

// Remote is a Target in a member process, reached through call.
type Remote struct{ Call Caller }

// ClientAddr asks the process.
func (r Remote) ClientAddr(ctx context.Context) (string, error) {
	var in Info
	err := r.Call(ctx, OpInfo, nil, &in)
	return in.ClientAddr, err
}

// Mark asks the process.
func (r Remote) Mark(ctx context.Context) (Sample, error) {
	var s Sample
	err := r.Call(ctx, OpMark, nil, &s)
	return s, err
}

// Peak asks the process.
func (r Remote) Peak(ctx context.Context) (Sample, error) {
	var s Sample
	err := r.Call(ctx, OpPeak, nil, &s)
	return s, err
}

// CloseNode asks the process to close its node.
func (r Remote) CloseNode(ctx context.Context) (time.Duration, error) {
	var c Closed
	err := r.Call(ctx, OpClose, nil, &c)
	return time.Duration(c.Seconds * float64(time.Second)), err
}
