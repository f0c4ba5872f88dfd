package coordcell

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/bench/internal/attack"
	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/prometheus/client_golang/prometheus"
)

// Member is one coord member in this process, its peers in other
// processes: coord's own TCP transport, default timings, fsync on. It
// implements cell.Member.
type Member struct {
	n *coord.Node
	// reg holds the member's metrics when its spec asked for them (the
	// scale scenario reads the keyspace bytes and live sessions there).
	reg *prometheus.Registry
}

var _ cell.Member = (*Member)(nil)

// OpenMember opens member spec.Index of a cell whose members are at
// spec.PeerAddrs. With spec.ClientAddrs it serves clients there
// (plaintext on loopback, as Open's cell does) under attack.Policy, for
// the client-attacks scenario: a client named reader-* may write nothing.
func OpenMember(ctx context.Context, spec cell.MemberSpec) (cell.Member, error) {
	if spec.Index < 0 || spec.Index >= len(spec.PeerAddrs) {
		return nil, fmt.Errorf("coord member %d of %d", spec.Index, len(spec.PeerAddrs))
	}
	var peers []coord.Peer
	for i, a := range spec.PeerAddrs {
		// A joining member lists the members it may ask, not itself.
		if !spec.Join || i != spec.Index {
			peers = append(peers, coord.Peer{Name: memberName(i), Addr: a})
		}
	}
	cfg := coord.Config{
		Name:              memberName(spec.Index),
		Addr:              spec.PeerAddrs[spec.Index],
		Peers:             peers,
		DataDir:           spec.Dir,
		Join:              spec.Join,
		QuotaBytes:        spec.Scale.QuotaBytes,
		ClientMaxWatchers: spec.Scale.ClientMaxWatchers,
	}
	if spec.Index < len(spec.ClientAddrs) {
		cfg.ClientAddr, cfg.ClientPolicy = spec.ClientAddrs[spec.Index], attack.Policy
	}
	var reg *prometheus.Registry
	if spec.Scale.Metrics {
		reg = prometheus.NewRegistry()
		cfg.Metrics = reg
	}
	n, err := coord.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("coord member %d: %w", spec.Index, err)
	}
	return &Member{n: n, reg: reg}, nil
}

// Node returns the member's node (attack.Noder: the client-attacks
// scenario reads its door's counters and times its Close).
func (m *Member) Node() *coord.Node { return m.n }

// Side returns "coord".
func (m *Member) Side() string { return "coord" }

// Put writes through the member.
func (m *Member) Put(ctx context.Context, key string, value []byte) error {
	_, err := m.n.Put(ctx, key, value)
	return err
}

// Get reads through the member; a missing key is not an error.
func (m *Member) Get(ctx context.Context, key string, serializable bool) error {
	var opts []coord.ReadOption
	if serializable {
		opts = append(opts, coord.Serializable())
	}
	_, err := m.n.Get(ctx, key, opts...)
	if errors.Is(err, coord.ErrNotFound) {
		err = nil
	}
	return err
}

// NewSession creates a session on the member.
func (m *Member) NewSession(ctx context.Context, ttl time.Duration) (cell.Session, error) {
	s, err := m.n.NewSession(ctx, coord.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return &session{s: s}, nil
}

// Watch watches prefix on the member.
func (m *Member) Watch(ctx context.Context, prefix string, fn func(key string)) error {
	w := m.n.Watch(ctx, prefix)
	go func() {
		for ev := range w.Events() {
			if ev.Type != coord.EventProgress {
				fn(ev.KV.Key)
			}
		}
	}()
	return nil
}

// Close closes the node.
func (m *Member) Close() error { return m.n.Close() }
