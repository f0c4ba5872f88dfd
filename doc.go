// Package coord turns a set of Go processes into a coordination cell: a
// small, strongly consistent, Raft-replicated key-value store living
// inside the processes themselves, with no external server to run.
//
// # Lifecycle
//
// Each process opens its member with Open and leaves with Close:
//
//	n, err := coord.Open(ctx, coord.Config{
//		Name:    "a",
//		Addr:    "10.0.0.1:7001",
//		Peers:   []coord.Peer{
//			{Name: "a", Addr: "10.0.0.1:7001"},
//			{Name: "b", Addr: "10.0.0.2:7001"},
//			{Name: "c", Addr: "10.0.0.3:7001"},
//		},
//		DataDir: "/var/lib/myservice/coord",
//	})
//	defer n.Close()
//
// Every founding member gets the same Peers. A member that restarts finds
// its state in DataDir and rejoins. Tests use package coordtest, which
// starts whole in-memory cells with fault injection in one line.
//
// # Consistency
//
// Writes (Put, Delete, Txn) are acknowledged once a majority of members
// has them on disk (fsync) and this member has applied them: they survive
// the crash of any minority and the restart of every member.
//
// Reads (Get, List) are linearizable by default on every member, not only
// the leader: the member asks the leader for a read index (confirmed by a
// heartbeat round, never by a clock-based lease) and waits until it has
// applied that index. Serializable() trades that for a local read that
// may be stale but needs no quorum.
//
// A member that cannot reach a quorum refuses writes and linearizable
// reads with ErrNoQuorum rather than answer from stale state.
//
// A transaction whose operations are all gets is a read too: a read index
// and the member's state, never a log entry. One read returns at most
// Config.MaxReadBytes (ErrReadTooLarge past it, with no more than that
// read): List pages a large prefix with Limit and After, and the gets of
// one transaction share the bound, which a transaction that writes
// carries into the log so that every member applies it alike.
//
// Each member serves reads from its live keyspace in memory (Pebble on
// disk is the durable copy, and memory is rebuilt from it at start), so
// Config.QuotaBytes also bounds a member's memory.
//
// # Failure semantics
//
// Writes are exactly-once: the library sends a write again whenever it
// may have been lost (a dropped forward, a leader that lost office, a
// client's member gone) and the cell applies it once, so a call with a
// live context waits for its one real result. A write that certainly did
// not happen fails with ErrNoQuorum (or ErrClosed). A call that ended
// before its write's outcome was known (its context ended, its member
// closed) fails with an *AmbiguousError (errors.Is ErrAmbiguous), whose
// ID Outcome settles: applied, with its result, or never to apply. Both
// wrap the context's error when the context was the cause, so errors.Is
// with context.DeadlineExceeded works too. Bad input (oversized keys or
// values, too many operations, a transaction branch that writes a key
// twice, over quota, a read over its bound) fails with its own sentinel
// and changes nothing.
//
// # Revisions and watches
//
// The cell has one revision counter that grows by one per committed
// change; a transaction's writes share one revision. Every KV carries the
// revision that created it and the one that last modified it. Watch
// streams the changes under a prefix in revision order, each exactly once,
// starting after any retained revision (FromRev), so List followed by
// Watch(FromRev(rev)) never misses a change.
//
// # Sessions, locks, elections and fencing
//
// A Session is a holder's liveness: its member keeps it alive with
// batched keep-alives that never touch the Raft log, and its ephemeral
// keys go with it in one committed change when it expires or closes.
// Jeopardy and Until tell the holder, without polling, when it must stop
// relying on it. Mutex, RWMutex, Semaphore, Acquire (a lease-style lock)
// and Election are fair queues of a session's ephemeral keys; each grant
// carries a fencing Token, the cell revision of the grant, greater than
// every earlier grant's. A resource guards its writes with a Fence (or
// asks the cell with CheckToken), so a holder that lost its lock while
// paused is refused even if it does not know yet.
//
// # Membership
//
// AddLearner, Promote and RemoveMember change the cell's members one at a
// time; learners replicate, serve reads and watches, and do not vote.
//
// # Concurrency
//
// A Node is safe for concurrent use by many goroutines. A Txn builder is
// used by one goroutine. Channels returned by the package document who
// closes them and whether they can lose values.
package coord
