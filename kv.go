package coord

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
)

// SessionID identifies a session in the cell; unique forever.
type SessionID int64

// KV is a key as the cell stores it.
type KV struct {
	Key       string
	Value     []byte
	Version   int64 // 1 on create, +1 on each put; 0 = absent
	CreateRev int64 // the revision that created the key
	ModRev    int64 // the revision of the last put
	// Session owns an ephemeral key (deleted when the session ends);
	// 0 for an ordinary key.
	Session SessionID
}

func fromCmdKV(kv command.KV) KV {
	return KV{Key: kv.Key, Value: kv.Value, Version: kv.Version,
		CreateRev: kv.CreateRev, ModRev: kv.ModRev, Session: SessionID(kv.Session)}
}

// ReadOption changes how Get and List read.
type ReadOption func(*readOptions)

// readOptions are spi's: the backends read them as they are.
type readOptions = spi.ReadOptions

// Serializable makes a read answer from this member's applied state
// without confirming with the leader: faster, and available on a
// minority side, but possibly stale.
func Serializable() ReadOption {
	return func(o *readOptions) { o.Serializable = true }
}

// Limit makes List return at most n keys: the first n under its prefix
// (after After's key, when given), in key order. n = 0 means no limit, as
// without Limit; a negative n fails with ErrInvalidArgument. Get takes no
// Limit (ErrInvalidArgument).
//
// Limit and After page through a prefix: ask for the next page with
// After and the last key of the one before. A page of n keys may have
// more after it; a shorter one is the last:
//
//	for after := ""; ; {
//		kvs, _, err := c.List(ctx, "jobs/", coord.Limit(500), coord.After(after))
//		if err != nil {
//			return err
//		}
//		process(kvs)
//		if len(kvs) < 500 {
//			break // the last page
//		}
//		after = kvs[len(kvs)-1].Key
//	}
//
// Each page is a read of its own, at the revision List returns with it:
// a key written while the pages are read may be missed by the pages
// already read or found by a later one, as with etcd's Range limit
// without a revision. Every key that stays put throughout is returned
// exactly once. To see a prefix at one revision, List it whole (within
// Config.MaxReadBytes) or use ListWatch.
func Limit(n int) ReadOption {
	return func(o *readOptions) { o.Limit = n }
}

// After makes List start strictly after key: it returns only the keys
// under its prefix that sort after key, bytewise. key need not exist, nor
// be under the prefix (a key before the prefix starts at its first key,
// one after it leaves nothing). "" starts at the prefix, as without
// After. See Limit for paging; Get takes no After (ErrInvalidArgument).
func After(key string) ReadOption {
	return func(o *readOptions) { o.After = key }
}

// WithRev makes Get or List read the keys as they were at revision rev:
// the read is linearizable first (unless Serializable), then answered
// from the state at rev, rebuilt from the live keys and the change
// history above rev. The revision List returns is the current one, as
// etcd's header revision (the KVs are as of rev; to watch on from them,
// use FromRev(rev)). A rev older than the retained history
// (Config.HistoryRevisions) fails with a *CompactedError (ErrCompacted);
// one above the current revision with ErrFutureRev. A read at a past
// revision also pays, within Config.MaxReadBytes, for the history it
// reads: every change since rev, whatever its key, so a read of a busy
// cell's distant past can fail with ErrReadTooLarge. rev = 0 reads the
// current state, as without WithRev; a negative rev is ErrInvalidArgument.
func WithRev(rev int64) ReadOption {
	return func(o *readOptions) { o.Rev = rev }
}

// Range makes List read the keys in [key, end) instead of those under a
// prefix: List(ctx, "a", Range("c")) reads "a" up to but not including
// "c". end "\x00" reads every key from key on (etcd's form; with key "\x00"
// too, every key); an end at or before key reads nothing, and an empty
// end the key alone. Limit, After, and every other read option apply to
// the range as to a prefix. Get takes no Range (ErrInvalidArgument).
func Range(end string) ReadOption {
	return func(o *readOptions) { o.End, o.Range = end, true }
}

// KeysOnly makes Get and List return the keys without their values
// (Value nil): such a read costs only its keys against
// Config.MaxReadBytes.
func KeysOnly() ReadOption {
	return func(o *readOptions) { o.KeysOnly = true }
}

// CountOnly makes List return no keys, only their count, through
// Counted (which it needs to be of use). It walks every key it counts,
// each costing its key and the per-key overhead against
// Config.MaxReadBytes.
func CountOnly() ReadOption {
	return func(o *readOptions) { o.CountOnly = true }
}

// Counted makes List store in *n how many keys it matched: those of its
// prefix or range, after After, within the revision filters, before
// Limit. So a List with Limit(l) was truncated (etcd's more) exactly
// when *n > len(kvs), and one read fills etcd's count and more. The List
// then walks every matching key (its key and the per-key overhead count
// against Config.MaxReadBytes, values only for the keys returned). *n is
// written only when List succeeds. Get takes no Counted.
func Counted(n *int64) ReadOption {
	return func(o *readOptions) { o.Counted = n }
}

// SortTarget is what SortBy orders keys by.
type SortTarget int

// The sort targets.
const (
	SortByKey       SortTarget = iota // the key, bytewise (List's default)
	SortByVersion                     // KV.Version
	SortByCreateRev                   // KV.CreateRev
	SortByModRev                      // KV.ModRev
	SortByValue                       // KV.Value, bytewise
)

// SortOrder is the direction of SortBy.
type SortOrder int

// The sort orders.
const (
	SortAscend SortOrder = iota
	SortDescend
)

// SortBy makes List order its keys by target, in order, before Limit
// applies (as etcd does): SortBy(SortByCreateRev, SortDescend) with
// Limit(1) is the newest key. Keys that tie keep key order (reverse key
// order when descending). A sort other than by key ascending walks every
// matching key, as Counted does. An unknown target or order is
// ErrInvalidArgument.
func SortBy(target SortTarget, order SortOrder) ReadOption {
	return func(o *readOptions) {
		if target < SortByKey || target > SortByValue || (order != SortAscend && order != SortDescend) {
			o.SortTarget = 255 // refused by the read's checks
			return
		}
		o.SortTarget, o.SortDescend = uint8(target), order == SortDescend
	}
}

// MinModRev makes List return only keys last written at rev or later
// (0: no bound).
func MinModRev(rev int64) ReadOption { return func(o *readOptions) { o.MinModRev = rev } }

// MaxModRev makes List return only keys last written at rev or earlier
// (0: no bound).
func MaxModRev(rev int64) ReadOption { return func(o *readOptions) { o.MaxModRev = rev } }

// MinCreateRev makes List return only keys created at rev or later (0:
// no bound).
func MinCreateRev(rev int64) ReadOption { return func(o *readOptions) { o.MinCreateRev = rev } }

// MaxCreateRev makes List return only keys created at rev or earlier (0:
// no bound): with SortBy(SortByCreateRev, SortDescend) and Limit(1), the
// newest key created before rev, as etcd's concurrency.Mutex asks.
func MaxCreateRev(rev int64) ReadOption { return func(o *readOptions) { o.MaxCreateRev = rev } }

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WriteOption changes how Put and Delete write.
type WriteOption func(*writeOptions)

type writeOptions struct {
	ifVersion *int64
	session   int64
	owner     *Session // the session behind session, to tell closed from expired
	idemKey   string
}

// IfVersion makes the write conditional on the key's current version:
// 0 means "must not exist" (create only). A failed condition returns
// ErrConflict and changes nothing.
func IfVersion(v int64) WriteOption {
	return func(o *writeOptions) { o.ifVersion = &v }
}

// Ephemeral makes the written key belong to session s: it is deleted, in
// the same committed change as the session's end, when s expires or is
// closed. A write naming a session that already ended fails with
// ErrSessionClosed if this handle closed it, else ErrSessionExpired.
func Ephemeral(s *Session) WriteOption {
	return func(o *writeOptions) { o.session, o.owner = int64(s.id), s }
}

// sessionErr turns the cell's "no such session" for a write naming a
// session this process closed into ErrSessionClosed, as the recipes on
// that session say.
func (o writeOptions) sessionErr(err error) error {
	if o.owner != nil && errors.Is(err, ErrSessionExpired) && errors.Is(o.owner.Err(), ErrSessionClosed) {
		return fmt.Errorf("%w: session %d", ErrSessionClosed, o.owner.id)
	}
	return err
}

func writeOpts(opts []WriteOption) writeOptions {
	var o writeOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Get returns the key. It fails with ErrNotFound if the key does not
// exist (at WithRev's revision, when given; KeysOnly leaves its value
// out). By default the read is linearizable (it reflects every write
// completed before the call, on any member); Serializable() reads this
// member's state without asking the leader; through a Client, one of a
// key under ClientConfig.Cache is answered from the client's memory.
func (c *cellOps) Get(ctx context.Context, key string, opts ...ReadOption) (KV, error) {
	return getKey(ctx, c, key, opts)
}

// List returns every key under prefix, in key order, and the revision
// of the state it read: Watch(ctx, prefix, FromRev(rev)) then continues
// exactly after it. Reads are linearizable unless Serializable() is given.
//
// Range(end) reads [prefix, end) instead of a prefix; WithRev reads as
// of a past revision (and then returns the current revision, as etcd's
// header); KeysOnly, CountOnly, Counted, SortBy and the revision filters
// are etcd's Range options (docs/keys-and-watches.md). Through a Client
// they need a member of this version or later, else ErrInvalidArgument.
//
// Limit and After return one page of the prefix instead (see Limit). A
// List (or a page) that would return more than Config.MaxReadBytes fails
// with ErrReadTooLarge, having read no more than that: page it, or raise
// the bound.
//
// Through a Client, a Serializable() List of a prefix under
// ClientConfig.Cache is answered from the client's memory, with the
// revision the cache was current to (and, costing the member nothing,
// without its Config.MaxReadBytes); Limit and After need a member of this version or
// later; an older one answers ErrInvalidArgument.
func (c *cellOps) List(ctx context.Context, prefix string, opts ...ReadOption) ([]KV, int64, error) {
	return listPrefix(ctx, c, prefix, opts)
}

// Put writes value under key and returns the key as written. With
// IfVersion(v) it is a compare-and-set (v = 0: create only) that fails
// with ErrConflict, changing nothing, when the key's version is not v.
// With Ephemeral(s) the key belongs to session s and is deleted when the
// session ends.
//
// The write applies once however often it is sent again. An
// *AmbiguousError (ErrAmbiguous) means the call ended before its outcome
// was known: Outcome(err.ID) settles it. ErrNoQuorum means it did not
// happen.
func (c *cellOps) Put(ctx context.Context, key string, value []byte, opts ...WriteOption) (KV, error) {
	return putKey(ctx, c, key, value, opts)
}

// Delete deletes key and returns the cell revision after the delete.
// Deleting an absent key is not an error (the revision does not move).
// With IfVersion(v) it deletes only at that version, else ErrConflict.
func (c *cellOps) Delete(ctx context.Context, key string, opts ...WriteOption) (int64, error) {
	return deleteKey(ctx, c, key, opts)
}

// The KV calls, shared by every Cell: validation happens here, once,
// whatever the backend.

func getKey(ctx context.Context, b *cellOps, key string, opts []ReadOption) (KV, error) {
	if err := b.limits().CheckKey(key); err != nil {
		return KV{}, err
	}
	o := readOpts(opts)
	if err := spi.CheckGet(key, o); err != nil {
		return KV{}, err
	}
	kv, ok, err := b.get(ctx, key, o)
	if err != nil {
		return KV{}, watchErr(err)
	}
	if !ok {
		return KV{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return kv, nil
}

func listPrefix(ctx context.Context, b *cellOps, prefix string, opts []ReadOption) ([]KV, int64, error) {
	o := readOpts(opts)
	if o.Range && o.End == "" {
		if prefix == "" {
			return nil, 0, fmt.Errorf("%w: List of the empty key alone (Range(\"\"))", ErrInvalidKey)
		}
		o.End = prefix + "\x00" // the key alone
	}
	if err := b.limits().CheckList(prefix, o); err != nil {
		return nil, 0, err
	}
	kvs, rev, err := b.list(ctx, prefix, o)
	return kvs, rev, watchErr(err)
}

// putKey and deleteKey are one-operation transactions, validated and
// committed as Txn.Commit does.
func putKey(ctx context.Context, b *cellOps, key string, value []byte, opts []WriteOption) (KV, error) {
	o := writeOpts(opts)
	txn := &command.Txn{Then: []command.Op{{Type: command.OpPut, Key: key, Value: value, Session: o.session}}}
	res, err := commitIfVersion(ctx, b, txn, key, o)
	if err != nil {
		return KV{}, o.sessionErr(err)
	}
	return fromCmdKV(res.Ops[0].KVs[0]), nil
}

func deleteKey(ctx context.Context, b *cellOps, key string, opts []WriteOption) (int64, error) {
	txn := &command.Txn{Then: []command.Op{{Type: command.OpDelete, Key: key}}}
	res, err := commitIfVersion(ctx, b, txn, key, writeOpts(opts))
	if err != nil {
		return 0, err
	}
	return res.Rev, nil
}

// commitIfVersion commits txn, conditional on key's version when o says
// so, and maps a failed condition to ErrConflict.
func commitIfVersion(ctx context.Context, b *cellOps, txn *command.Txn, key string, o writeOptions) (command.Result, error) {
	if o.ifVersion != nil {
		txn.If = []command.Compare{{Key: key, Target: command.TargetVersion, Op: command.Equal, Int: *o.ifVersion}}
	}
	prop, err := o.proposerFor()
	if err != nil {
		return command.Result{}, err
	}
	res, err := commitTxnAs(ctx, b, txn, prop)
	if err != nil {
		return res, err
	}
	if !res.Succeeded {
		return res, fmt.Errorf("%w: %q is not at version %d", ErrConflict, key, *o.ifVersion)
	}
	return res, nil
}

// commitTxn validates txn against the cell's limits and proposes it: the
// one path of every write.
func commitTxn(ctx context.Context, b *cellOps, txn *command.Txn) (command.Result, error) {
	return commitTxnAs(ctx, b, txn, nil)
}

// commitTxnAs is commitTxn with the proposer the caller asked for (an
// idempotency key), nil for the backend's own.
func commitTxnAs(ctx context.Context, b *cellOps, txn *command.Txn, prop *command.Proposer) (command.Result, error) {
	if err := b.limits().CheckTxn(txn); err != nil {
		return command.Result{}, err
	}
	return b.propose(ctx, &command.Command{Kind: command.KindTxn, Txn: txn, Proposer: prop})
}
