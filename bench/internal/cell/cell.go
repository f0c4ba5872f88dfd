// Package cell is the side-agnostic face of a three-member cluster: the
// few operations the scenarios need, implemented once for coord
// (package coordcell) and once for embedded etcd (package etcdcell), so
// every scenario runs the same code on both sides.
package cell

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Members is the size of every cell the bench starts.
const Members = 3

// StopMode is how a member is stopped in the failover scenario.
type StopMode string

// The ways to stop a member.
const (
	// Crash stops the member without any goodbye: no leadership hand-over,
	// nothing more sent to its peers. coord: its transport is cut (every
	// message it sends is dropped) at once, and it is closed later; etcd:
	// EtcdServer.HardStop.
	Crash StopMode = "crash"
	// Graceful is each side's ordinary shutdown, which hands leadership
	// over first: coord Node.Close, etcd Etcd.Close.
	Graceful StopMode = "graceful"
)

// ParseStopMode parses a -failover-stop flag value.
func ParseStopMode(s string) (StopMode, error) {
	switch m := StopMode(s); m {
	case Crash, Graceful:
		return m, nil
	}
	return "", fmt.Errorf("stop mode %q: want %q or %q", s, Crash, Graceful)
}

// ErrStopped is returned for an operation on a stopped member.
var ErrStopped = errors.New("cell: member stopped")

// Options are the settings both sides share. Everything else is each
// side's default (timings, fsync on).
type Options struct {
	// Dir is the parent directory of the members' data directories. It
	// must be on a real disk: the bench measures fsync.
	Dir string
}

// Cell is a running three-member cluster in this process. Members are
// numbered 0..Members-1; every method is safe for concurrent use.
type Cell interface {
	// Side names the implementation: "coord" or "etcd".
	Side() string
	// Put writes value under key through member m.
	Put(ctx context.Context, m int, key string, value []byte) error
	// Get reads key through member m: linearizable, or serializable
	// (member-local) when serializable is true.
	Get(ctx context.Context, m int, key string, serializable bool) error
	// Leader returns the member that leads now, as its own status says,
	// or -1. Stopped members are not asked.
	Leader() int
	// LogIndex returns the last Raft log index of the leader.
	LogIndex(ctx context.Context) (uint64, error)
	// Stop stops member m the way mode says and returns once the stop
	// has taken effect (for Graceful: once the member has closed).
	Stop(ctx context.Context, m int, mode StopMode) error
	// NewSession creates a session (etcd: a lease kept alive by the
	// client) with the given TTL through member m.
	NewSession(ctx context.Context, m int, ttl time.Duration) (Session, error)
	// Watch starts a watch of every key under prefix served by member m,
	// calling fn with the key of each change from one goroutine per
	// watch. It returns once the watch is established; the watch ends
	// with ctx or Close.
	Watch(ctx context.Context, m int, prefix string, fn func(key string)) error
	// Close stops every member and removes nothing from disk.
	Close() error
}

// Session is a holder's liveness: locks and leaderships hang off it.
type Session interface {
	// NewMutex returns the session's handle on the fair lock name.
	NewMutex(name string) Mutex
	// NewElection returns the session's handle on the election group.
	NewElection(group string) Election
	// Expired reports whether the session has ended without being
	// closed or orphaned by its holder (the cell expired it).
	Expired() bool
	// Orphan stops keeping the session alive without ending it, as a
	// crashed holder would: the cell expires it after its TTL.
	Orphan()
	// Close ends the session in the cell.
	Close(ctx context.Context) error
}

// Mutex is a fair distributed lock.
type Mutex interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// Election is one campaigner in a leader election.
type Election interface {
	// Campaign blocks until this campaigner leads.
	Campaign(ctx context.Context, value string) error
	// Resign gives up the leadership.
	Resign(ctx context.Context) error
}

// Opener starts a cell.
type Opener func(ctx context.Context, opts Options) (Cell, error)

// Fsyncer is implemented by cells that count their Raft log fsyncs.
type Fsyncer interface {
	// LogFsyncs returns the Raft log fsyncs of all members since they
	// started, and the leader's share of them (0 if the cell cannot tell
	// the members apart).
	LogFsyncs() (all, leader uint64)
}
