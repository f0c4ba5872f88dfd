package cell

import (
	"context"
	"time"
)

// MemberSpec places one member of a cell whose members run in separate
// processes: each process opens its own member from the same peer lists.
type MemberSpec struct {
	// Index is this member's number, 0..len(PeerAddrs)-1.
	Index int `json:"index"`
	// PeerAddrs are every member's peer (Raft transport) address, by
	// index.
	PeerAddrs []string `json:"peer_addrs"`
	// ClientAddrs are every member's client address, by index, for the
	// sides whose members need one to start (etcd).
	ClientAddrs []string `json:"client_addrs,omitempty"`
	// Dir is this member's own data directory. It must be on a real
	// disk: the bench measures fsync.
	Dir string `json:"dir"`
	// Join starts a member added to a running cell (coord: AddLearner,
	// then Config.Join; etcd: MemberAddAsLearner, then the "existing"
	// cluster state) instead of a founder. It is not waited for with a
	// write: a learner may take none.
	Join bool `json:"join,omitempty"`
	// Scale holds the settings of the scale scenario; the zero value is
	// each side's defaults.
	Scale ScaleSpec `json:"scale,omitzero"`
}

// ScaleSpec is what the scale scenario sets beyond each side's defaults.
type ScaleSpec struct {
	// QuotaBytes is the keyspace cap (coord Config.QuotaBytes; etcd
	// QuotaBackendBytes, a bound on its database file); 0 = the side's
	// default (2 GiB on both).
	QuotaBytes int64 `json:"quota_bytes,omitempty"`
	// ClientMaxWatchers raises coord's bound on one client's watches on
	// a member (Config.ClientMaxWatchers); 0 = its default. etcd has no
	// such bound.
	ClientMaxWatchers int `json:"client_max_watchers,omitempty"`
	// Metrics has a coord member register its metrics (a registry of
	// its own), so the scenario can read the keyspace bytes the quota
	// counts and the live sessions.
	Metrics bool `json:"metrics,omitempty"`
}

// SegmentCounter is a Member whose Raft log counts its segments (coord):
// the soak holds the ones filled on the append path, each a stall of the
// member's commits, at zero.
type SegmentCounter interface {
	// SegmentCuts returns the log segments the member started since it
	// opened and, of them, those filled on the append path.
	SegmentCuts() (started, inline int64, err error)
}

// Member is one member of a cell, in this process, called the way a
// service embedding it calls it: in-process, not through a client. Every
// method is safe for concurrent use.
type Member interface {
	// Side names the implementation: "coord" or "etcd".
	Side() string
	// Put writes value under key.
	Put(ctx context.Context, key string, value []byte) error
	// Get reads key: linearizable, or member-local when serializable;
	// a missing key is not an error.
	Get(ctx context.Context, key string, serializable bool) error
	// NewSession creates a session with the given TTL.
	NewSession(ctx context.Context, ttl time.Duration) (Session, error)
	// Watch is Cell.Watch on this member.
	Watch(ctx context.Context, prefix string, fn func(key string)) error
	// Close stops the member and removes nothing from disk.
	Close() error
}

// MemberOpener starts one member of a multi-process cell. It returns once
// the member runs, not once the cell has a quorum (the other members may
// not have started yet): see AwaitMemberWrite.
type MemberOpener func(ctx context.Context, spec MemberSpec) (Member, error)

// AwaitMemberWrite retries a small write through m until one commits:
// the cell has a leader and a quorum. ctx bounds the wait.
func AwaitMemberWrite(ctx context.Context, m Member) error {
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		err := m.Put(actx, "bench/ready", []byte("ready"))
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}
