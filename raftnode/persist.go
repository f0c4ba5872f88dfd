package raftnode

import "sync/atomic"

// The Raft log is written on the raft loop, once per Ready: every entry
// and the hard state of one Ready in one batch with one fsync (group
// commit), before the Ready's messages that promise durability go out.
// A leader sends its appends before its own write (Raft thesis 10.2.1),
// so its followers' writes and its own overlap. Persisting on a goroutine
// of its own (raft's AsyncStorageWrites) was measured against this and
// lost: contended lock hand-offs at 0.54x, single callers worse, puts at
// 64 callers within noise (bench/RESULTS.md), so it went, and with it the
// second Ready path.

// persister says how far the log is durable.
type persister struct {
	// last is the highest log index known durable, for compaction,
	// which must never discard an entry the log does not hold yet.
	last atomic.Uint64
}

func (p *persister) init(last uint64) { p.last.Store(last) }
