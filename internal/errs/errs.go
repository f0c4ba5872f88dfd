// Package errs holds the sentinel errors that the root package exports.
// They live here so that raftnode and the root package share one value
// per error without an import cycle; users see them as coord.ErrX.
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

// Fencing (fencing.go in the root package).
var (
	StaleToken   = errors.New("coord: stale fencing token")
	InvalidToken = errors.New("coord: invalid fencing token")
	MarksFormat  = errors.New("coord: unusable fencing marks file")
	MarksInUse   = errors.New("coord: fencing marks file in use")
)

// Locks, semaphores and elections (queue.go and lock.go in the root package).
var (
	InvalidArgument = errors.New("coord: invalid argument")
)
