package coord

import (
	"github.com/coordcell/coord/fence"
	"github.com/coordcell/coord/internal/errs"
)

// The sentinel errors. Every error the package returns wraps one of these
// (or a context error), so callers branch with errors.Is. The packages
// below the root return these same values where they mean the same thing
// (transport.ErrClosed and storage.ErrClosed are ErrClosed,
// storage.ErrCompacted is ErrCompacted, transport.ErrConfig is
// ErrInvalidConfig), so one check covers every layer.
var (
	// ErrNotFound: Get found no such key.
	ErrNotFound = errs.NotFound
	// ErrConflict: a compare-and-set (IfVersion) did not hold; nothing changed.
	ErrConflict = errs.Conflict
	// ErrAmbiguous: the write reached Raft but its outcome is unknown (the
	// context ended or the leader changed before it was seen to apply). It
	// may or may not have been applied: read the state before retrying.
	// Contrast with ErrNoQuorum, which means it certainly did not happen.
	//
	// Writes are exactly-once: the library sends a write again when it
	// may have been lost and the cell applies it once, so a call whose
	// context lives waits for the one real result. ErrAmbiguous is
	// returned only when the context ended (or the member closed) first,
	// as an *AmbiguousError whose ID Node.Outcome (or Client.Outcome)
	// settles: applied, with its result, or never to apply.
	ErrAmbiguous = errs.Ambiguous
	// ErrRetired: the cell no longer knows a write's outcome: its
	// exactly-once record was retired (its proposer fell silent for a
	// million log entries, or kept too many) before this retry or
	// Outcome reached it. It did not apply now; an earlier copy may have.
	ErrRetired = errs.Retired
	// ErrNoQuorum: this node cannot reach a quorum (it is on the minority
	// side of a partition, or the cell has no leader); the request was not
	// carried out. Writes and linearizable reads fail with it rather than
	// answer from stale state, once the call itself has waited three
	// election timeouts with no leader in sight (or its context ended
	// first).
	ErrNoQuorum = errs.NoQuorum
	// ErrTimeout: a wait bounded by the context's deadline ran out.
	ErrTimeout = errs.Timeout
	// ErrClosed: the node is closed (or failed; see Node.Err).
	ErrClosed = errs.Closed
	// ErrKeyTooLarge: the key is longer than Config.MaxKeySize.
	ErrKeyTooLarge = errs.KeyTooLarge
	// ErrValueTooLarge: the value is larger than Config.MaxValueSize.
	ErrValueTooLarge = errs.ValueTooLarge
	// ErrTooManyOps: a transaction has more than Config.MaxTxnOps operations.
	ErrTooManyOps = errs.TooManyOps
	// ErrQuotaExceeded: the write would take the keyspace past
	// Config.QuotaBytes. Deletes still work.
	ErrQuotaExceeded = errs.QuotaExceeded
	// ErrCompacted: the revision asked for is older than the retained history.
	ErrCompacted = errs.Compacted
	// ErrInvalidKey: the key is empty or otherwise unusable.
	ErrInvalidKey = errs.InvalidKey
	// ErrInvalidConfig: Open was given a Config it cannot run with, or a
	// membership change (AddLearner, UpdateMember) a name or address a
	// member cannot have.
	ErrInvalidConfig = errs.InvalidConfig
	// ErrSessionExpired: the session is gone (expired, or closed through
	// another handle), so an ephemeral write naming it was refused.
	ErrSessionExpired = errs.SessionExpired
	// ErrSessionClosed: the session was closed by its holder (an
	// ephemeral write naming it, through that handle, says so too).
	ErrSessionClosed = errs.SessionClosed
	// ErrInvalidTTL: a session TTL below the minimum or above the
	// maximum (see WithTTL).
	ErrInvalidTTL = errs.InvalidTTL
	// ErrLocked: TryLock found the lock held (or queued for) by another.
	ErrLocked = errs.Locked
	// ErrNotHeld: Unlock, Resign or Proclaim on something this handle
	// does not hold (never acquired, already released, or lost).
	ErrNotHeld = errs.NotHeld
	// ErrNoLeader: the election has no leader now.
	ErrNoLeader = errs.NoLeader
	// ErrNotLeader: Proclaim or Resign by a campaigner that does not lead.
	ErrNotLeader = errs.NotLeader
	// ErrSlowWatcher: a watch's consumer fell too far behind and the watch
	// was ended; the error (a *SlowWatcherError) says the revision to
	// resume from.
	ErrSlowWatcher = errs.SlowWatcher
	// ErrMemberExists: AddLearner named a current member, or the name of a
	// removed one (Raft IDs, derived from names, are never reused); or
	// UpdateMember gave a member another member's address.
	ErrMemberExists = errs.MemberExists
	// ErrUnknownMember: no member has that name.
	ErrUnknownMember = errs.UnknownMember
	// ErrNotCaughtUp: Promote of a learner whose log is still well behind
	// the leader's; try again once it has caught up.
	ErrNotCaughtUp = errs.NotCaughtUp
	// ErrStateLost: this member came back with a data directory the cell
	// does not know (wiped, restored from an old copy, or another
	// member's), so it may have lost its vote and entries it acknowledged.
	// The other members ignore it; remove it (RemoveMember) and add it
	// again under a new name with an empty data directory. Node.Err
	// reports it.
	ErrStateLost = errs.StateLost
	// ErrDataDir: Open could not use the data directory (not writable,
	// locked by another process, an unknown format, damaged).
	ErrDataDir = errs.DataDir
	// ErrListen: Open could not listen on Addr (in use, not local).
	ErrListen = errs.Listen
	// ErrInternal: a fault inside the member (an invariant broke, storage
	// failed). The member stops; Node.Err says why.
	ErrInternal = errs.Internal
)

// The sentinel errors of fencing (Fence, FileMarks, ParseToken).
var (
	// ErrStaleToken: a Fence refused a token lower than the highest it has
	// admitted for the resource: the holder has lost its lock or
	// leadership. The write must not happen.
	ErrStaleToken = fence.ErrStaleToken
	// ErrInvalidToken: a fencing token is missing, malformed or not
	// positive (0 means "no token").
	ErrInvalidToken = fence.ErrInvalidToken
	// ErrMarksFormat: OpenFileMarks found a file it cannot use: not a marks
	// file, an unknown format version, or damage before its last record
	// (a torn last record, left by a crash mid-write, is not an error).
	ErrMarksFormat = fence.ErrMarksFormat
	// ErrMarksInUse: OpenFileMarks found the file open by another
	// FileMarks, in this process or another one; two writers would each
	// trust marks the other does not see.
	ErrMarksInUse = fence.ErrMarksInUse
	// ErrMarkStore: a MarkStore broke its contract (Raise returned a mark
	// below the token it raised to); the write must not happen.
	ErrMarkStore = fence.ErrMarkStore
)

// The sentinel errors of locks, semaphores and elections.
var (
	// ErrInvalidArgument: a recipe was given an argument it cannot work
	// with, such as a Semaphore with fewer than one place.
	ErrInvalidArgument = errs.InvalidArgument
)

// The sentinel error of bounded reads.
var (
	// ErrReadTooLarge: a read would return more than Config.MaxReadBytes
	// (keys and values, plus a small overhead per key): a List, or the
	// gets of one transaction. Nothing was returned and, for a
	// transaction, nothing changed. Page a List with Limit and After;
	// read less in one transaction.
	ErrReadTooLarge = errs.ReadTooLarge
	// ErrFutureRev: a read WithRev asked for a revision above the cell's
	// current one (on a Serializable read, above this member's). Nothing
	// was read; a revision is reached only by a write, so retrying soon
	// does not help unless one is under way.
	ErrFutureRev = errs.FutureRev
)

// The sentinel errors of clients (Connect) and of the members serving
// them (Admin.ServeClients). On the wire they travel as clientwire's own
// codes, not the numbered ones above.
var (
	// ErrForbidden: the client may not do this: connect at all (the
	// member's ClientPolicy refused its identity), write under that key,
	// or act for a session another client created. Nothing was done.
	ErrForbidden = errs.Forbidden
	// ErrOverloaded: the member refused the work to protect itself: it
	// serves as many clients as it allows, or this client already has as
	// many requests in flight or watches open as the member allows.
	// Nothing was done; retry later or on another member.
	ErrOverloaded = errs.Overloaded
	// ErrTooManySessions: the client's identity already holds, in the
	// whole cell, as many live sessions as the member serving it allows
	// (Config.ClientMaxSessions); no session was created. Close some, or
	// let them expire. The count is the cell's, so another member does
	// not help.
	ErrTooManySessions = errs.TooManySessions
)

// ErrUnauthenticated: the client and a member could not authenticate
// each other over TLS: the member's certificate is not of the CA the
// client trusts, or the member refused the client's certificate (a
// credential of another cell, a revoked or forged one, a wrong
// ClientConfig.Secret, or a certificate of another CA). It is a
// client-side error, never sent on the wire; Connect returns it wrapped
// in ErrNoQuorum when no member accepted the client.
var ErrUnauthenticated = errs.Unauthenticated

// ErrNotReady is returned by Ready when its context ends first; it wraps
// the context's error and says which condition was still unmet.
var ErrNotReady = errs.NotReady

// Backup errors. Both are refusals: Restore writes nothing then.
var (
	// ErrBadBackup: the backup is truncated, corrupt (its checksum does
	// not match) or not a backup at all.
	ErrBadBackup = errs.BadBackup
	// ErrBackupVersion: the backup was written in a format this version
	// does not read.
	ErrBackupVersion = errs.BackupVersion
)

// ErrRemoved: this member was removed from the cell (RemoveMember, or the
// autopilot replacing it). It learns so from the log when its own removal
// applies here, or, if it was cut off when the removal committed, from a
// member of its configuration that applied it. It then stops: Node.Err
// returns ErrRemoved, Node.Done closes, Ready and /readyz fail, and one
// INFO line says so. Open of its data directory fails with it once its
// removal applied there (a member told by the others opens, and is told
// again). Its name cannot be used again: add the process back under a new
// name with an empty data directory. Clients of a removed member see
// ErrClosed and move on.
var ErrRemoved = errs.Removed
