// Package spi is the interface between the user's API (the root package:
// the Cell methods, Session and the recipes) and the two ways a process
// reaches a cell: as a member (internal/member) and as a client
// (internal/client). It is database/sql/driver to the root's
// database/sql: the root validates input, builds commands and runs the
// recipes once, over a Backend; a backend carries commands, reads and
// watches to the cell and keeps sessions alive, and knows nothing of the
// root.
//
// It speaks the cell's own vocabulary: commands and results
// (internal/command), keys as command.KV, and event streams (Event, fed
// into a Sink). Besides the interfaces it holds what both sides share
// so that it is written once: the input limits and their checks, the map
// from the state machine's status to the package's errors, a session's
// liveness as its holder sees it (Session), the retry rule, and
// ListWatch.
package spi

import (
	"context"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// Backend is a process's way into the cell. A member is one (its own
// Raft node and state); a client's forwards to the member it is
// connected to. Input reaching a backend has been validated against its
// Limits; a backend only carries the request.
type Backend interface {
	// Propose runs cmd through the cell (a transaction that writes
	// nothing is served as a read) and maps the state machine's status to
	// the package's errors (ResultErr).
	Propose(ctx context.Context, cmd *command.Command) (command.Result, error)
	// Get reads one key; ok is false when it does not exist.
	Get(ctx context.Context, key string, o ReadOptions) (kv command.KV, ok bool, err error)
	// List reads the keys under prefix, in key order (the page o asks
	// for, already validated), and the revision read at.
	List(ctx context.Context, prefix string, o ReadOptions) ([]command.KV, int64, error)
	// Watch starts a watch of prefix with o, already validated, feeding
	// sink until it ends (sink.End), and returns at once. o.FromSet
	// false means from the backend's current revision, o.MaxLagSet false
	// its default lag. The watch ends when ctx does.
	Watch(ctx context.Context, prefix string, o WatchOptions, sink Sink)
	// Settle waits (briefly, bounded) until every change the backend has
	// delivered to watchers has also reached its sessions, so a session
	// ended by a change a watcher saw knows it has ended.
	Settle(ctx context.Context)
	// ElectionTimeout is the cell's election timeout: the unit of every
	// retry and session bound.
	ElectionTimeout() time.Duration
	// Limits are the cell's input limits.
	Limits() Limits
	// WatchBuffer is the buffer of a watch's consumer channel. A
	// member's watchers read the cell's shared history, so the channel
	// is their watch's buffer; a client's watchers each queue in the
	// client (up to their lag bound), and the channel is a hand-off.
	WatchBuffer() int
	// Keeper keeps this process's sessions alive.
	Keeper() Keeper
	// Probes counts queue waits for the root's tests; never nil.
	Probes() *Probes
	// Stats are the member's session counters; nil for a client.
	Stats() *SessionStats
	// Resumable looks up session id for a holder that adopts it
	// (WithSessionID): its TTL, and a revision at least that of every
	// key its earlier holder made. A session the cell does not have is
	// ErrSessionExpired; one this side may not resume ErrInvalidArgument
	// or ErrForbidden.
	Resumable(ctx context.Context, id int64) (ttl time.Duration, rev int64, err error)
	// TimeToLive asks the cell's leader for session id's time left.
	TimeToLive(ctx context.Context, id int64) (time.Duration, error)
}

// Keeper is the keep-alive engine behind sessions: a member batches its
// sessions' keep-alives to the leader; a client's folds them into its
// member's batch.
type Keeper interface {
	// Add starts keeping s alive (unless s is manual: renew only).
	Add(s *Session)
	// Adopt is Add unless a session of s's ID is kept here already; it
	// reports whether it added s.
	Adopt(s *Session) bool
	// Remove stops keeping the session alive.
	Remove(id int64)
	// Renew sends a keep-alive for s now and waits until one is
	// confirmed; it returns s's new Until.
	Renew(ctx context.Context, s *Session) (time.Time, error)
	// Margin is how much earlier than the cell the holder counts a
	// session of this TTL as expired.
	Margin(ttl time.Duration) time.Duration
	// ProposeAsync proposes cmd (a session's end) without waiting.
	ProposeAsync(cmd *command.Command)
}

// ReadOptions are a read's options, as the root's ReadOption sets them.
type ReadOptions struct {
	Serializable bool
	// Limit and After page a List; 0 and "": the whole prefix.
	Limit int
	After string

	// The ranged read's options (etcd's Range), any of which makes the
	// read Ranged. Rev reads as of that revision (0: the current one).
	Rev int64
	// End, when not "", makes a List's first argument the start of
	// [start, End) rather than a prefix; "\x00" is every key from start.
	// Range is set by the root's Range option, which resolves End
	// before the read goes to a backend.
	End       string
	Range     bool
	KeysOnly  bool
	CountOnly bool
	// SortTarget (0: key) and SortDescend order the keys before Limit.
	SortTarget  uint8
	SortDescend bool
	// Revision filters, inclusive; 0: no bound.
	MinModRev, MaxModRev, MinCreateRev, MaxCreateRev int64
	// Counted, when not nil, receives how many keys matched, before Limit.
	Counted *int64
}

// MaxSortTarget is the highest SortTarget (by value).
const MaxSortTarget = 4

// Ranged reports whether o asks for more than a (paged) prefix read: a
// past revision, a range, keys or count only, a sort, a filter, a count.
func (o ReadOptions) Ranged() bool {
	return o.Rev != 0 || o.End != "" || o.Range || o.KeysOnly || o.CountOnly || o.SortTarget != 0 || o.SortDescend ||
		o.MinModRev != 0 || o.MaxModRev != 0 || o.MinCreateRev != 0 || o.MaxCreateRev != 0 || o.Counted != nil
}

// PointOnly reports whether o holds only what a Get takes: Serializable,
// Rev and KeysOnly.
func (o ReadOptions) PointOnly() bool {
	p := ReadOptions{Serializable: o.Serializable, Rev: o.Rev, KeysOnly: o.KeysOnly}
	return o == p
}

// Paged reports whether o asks for a page of a prefix (Limit or After),
// which only List takes.
func (o ReadOptions) Paged() bool { return o.Limit != 0 || o.After != "" }

// WatchOptions are a watch's options, as the root's WatchOption sets
// them.
type WatchOptions struct {
	FromRev    int64
	FromSet    bool
	PrevKV     bool
	Puts, Dels bool // filters: which types to deliver (both = all)
	Progress   time.Duration
	MaxLag     int64
	MaxLagSet  bool
	// Exact (the root's ExactKey) watches the watch's key alone; Range
	// (WatchRange) the keys in [key, End), End "\x00" every key from key
	// on. ResolveWatch turns either into the prefix a backend watches
	// and the match below, which backends filter by (Admits).
	Exact, Range bool
	End          string
	// Matching is set by ResolveWatch: only keys in [MatchFrom,
	// MatchEnd) are delivered (MatchEnd "\x00": no end).
	Matching            bool
	MatchFrom, MatchEnd string
}

// Admits reports whether a watch with o delivers changes of key.
func (o *WatchOptions) Admits(key string) bool {
	return !o.Matching || key >= o.MatchFrom && (o.MatchEnd == "\x00" || key < o.MatchEnd)
}

// ResolveWatch returns the prefix a watch of key with o (Exact or Range)
// watches, and sets o's match: the key itself, or the longest prefix
// the range's keys share. Without either it returns key, a prefix.
func ResolveWatch(key string, o *WatchOptions) string {
	switch {
	case o.Matching || !o.Exact && !o.Range:
		return key
	case o.Exact:
		o.Matching, o.MatchFrom, o.MatchEnd = true, key, key+"\x00"
		return key
	}
	o.Matching, o.MatchFrom, o.MatchEnd = true, key, o.End
	if o.End == "\x00" || o.End <= key {
		return "" // an empty range matches nothing: any prefix does
	}
	n := 0
	for n < len(key) && n < len(o.End) && key[n] == o.End[n] {
		n++
	}
	return key[:n]
}

// Wants reports whether a watch with o delivers events of type t.
func (o *WatchOptions) Wants(t EventType) bool {
	return (t == EventPut && o.Puts) || (t == EventDelete && o.Dels)
}

// EventType says what happened to a key; the values are the root's.
type EventType int

// The event types.
const (
	EventPut EventType = iota + 1
	EventDelete
	EventProgress
)

// Event is one change to one key, or a progress report, as a backend
// delivers it.
type Event struct {
	Type EventType
	KV   command.KV
	// PrevKV is the key before the change, set only for a watch that
	// asked (WatchOptions.PrevKV) and a change that had one.
	PrevKV   *command.KV
	Rev      int64
	EndOfRev bool
}

// Sink is a watch's consumer end: the root's Watcher, which a backend
// feeds. Its methods are safe for concurrent use.
type Sink interface {
	// Send delivers ev. It waits for the consumer until ev is taken
	// (true), poll fires or stop closes (false, nil: the caller looks at
	// its own state and calls again or ends), or ctx ends (ctx's error).
	// poll and stop may be nil.
	Send(ctx context.Context, ev Event, poll <-chan time.Time, stop <-chan struct{}) (bool, error)
	// TrySend delivers ev if the consumer has room now.
	TrySend(ev Event) bool
	// ProgressRequests carries the consumer's RequestProgress (one at a
	// time: its buffer is 1). A backend may put a request of its own.
	ProgressRequests() chan struct{}
	// OnProgressRequest has fn called for each progress request instead,
	// from now on and for one already waiting: for a backend that keeps
	// no goroutine waiting on ProgressRequests.
	OnProgressRequest(fn func())
	// TakeAsked reports, and clears, whether the consumer asked for a
	// progress report since the last call.
	TakeAsked() bool
	// LastRev is the last complete revision delivered, or the start.
	LastRev() int64
	// SetLastRev moves LastRev.
	SetLastRev(rev int64)
	// MarkReady says the watch is established (Watcher.Ready).
	MarkReady()
	// End ends the watch with err: once, after which nothing is sent.
	End(err error)
}
