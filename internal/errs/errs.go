// Package errs holds the sentinel errors that the root package exports.
// They live here so that every layer that means the same thing returns
// the same value without an import cycle: raftnode returns these, and
// storage and transport declare their closed, compacted, lost-state and
// bad-config errors as these very values. So errors.Is works across the
// layers and the root hands their errors on without translating. Users
// see them as coord.ErrX. Fencing's sentinels live in package fence, which
// imports nothing of ours; Closed and InvalidKey are fence's values.
package errs

import (
	"errors"

	"github.com/coordcell/coord/fence"
)

// Sentinels; see the root package's errors.go for what each means.
var (
	NotFound       = errors.New("coord: key not found")
	Conflict       = errors.New("coord: compare failed")
	Ambiguous      = errors.New("coord: outcome unknown; the write may or may not have been applied")
	NoQuorum       = errors.New("coord: no quorum reachable")
	Timeout        = errors.New("coord: timed out")
	Closed         = fence.ErrClosed
	KeyTooLarge    = errors.New("coord: key too large")
	ValueTooLarge  = errors.New("coord: value too large")
	TooManyOps     = errors.New("coord: too many operations in one transaction")
	QuotaExceeded  = errors.New("coord: keyspace quota exceeded")
	Compacted      = errors.New("coord: revision compacted")
	InvalidKey     = fence.ErrInvalidKey
	InvalidConfig  = errors.New("coord: invalid config")
	SessionExpired = errors.New("coord: session expired")
	SessionClosed  = errors.New("coord: session closed")
	InvalidTTL     = errors.New("coord: invalid session TTL")
	Locked         = errors.New("coord: locked by another holder")
	NotHeld        = errors.New("coord: not held")
	NoLeader       = errors.New("coord: election has no leader")
	NotLeader      = errors.New("coord: not the election's leader")
	SlowWatcher    = errors.New("coord: watcher fell too far behind")
	MemberExists   = errors.New("coord: member already exists")
	UnknownMember  = errors.New("coord: no such member")
	NotCaughtUp    = errors.New("coord: learner has not caught up with the leader")
	Internal       = errors.New("coord: internal error")
	StateLost      = errors.New("coord: member's durable state was lost or replaced")
	DataDir        = errors.New("coord: data directory unusable")
	Listen         = errors.New("coord: cannot listen")
)

// Locks, semaphores and elections (queue.go and lock.go in the root package).
var (
	InvalidArgument = errors.New("coord: invalid argument")
)

// Exactly-once writes (raftnode's resends, storage's proposer table).
var (
	Retired = errors.New("coord: outcome no longer known; the write's record was retired")
)

// Reads (List, transactions' gets) bounded in bytes.
var (
	ReadTooLarge = errors.New("coord: read too large")
	// FutureRev: a read at a revision the cell has not reached yet
	// (WithRev above the current revision).
	FutureRev = errors.New("coord: revision not yet reached")
)

// Membership (membership.go in the root package, raftnode's conf changes).
var (
	Removed = errors.New("coord: member removed from the cell")
)

// Clients and the members serving them (internal/client, internal/member).
var (
	Forbidden       = errors.New("coord: not allowed for this client")
	Overloaded      = errors.New("coord: member overloaded; request refused")
	TooManySessions = errors.New("coord: too many sessions for this client identity")
	Unauthenticated = errors.New("coord: TLS authentication with the member failed")
)

// Operations: readiness and backups (internal/member).
var (
	NotReady      = errors.New("coord: member not ready")
	BadBackup     = errors.New("coord: bad backup")
	BackupVersion = errors.New("coord: unknown backup format")
)
