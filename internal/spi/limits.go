package spi

import (
	"context"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
)

// Limits are a cell's input limits, checked on the shared path before
// anything is sent: one validation, whichever backend.
type Limits struct {
	MaxKey, MaxValue, MaxTxnOps int
	// MaxSessionTTL is the longest session TTL; 0 = unknown here (a
	// client's: its member checks).
	MaxSessionTTL time.Duration
}

// MaxListLimit bounds Limit, so it travels to a member in 32 bits; no
// page that long would fit Config.MaxReadBytes anyway.
const MaxListLimit = 1<<31 - 1

// CheckKey refuses an empty or oversized key.
func (l Limits) CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", errs.InvalidKey)
	}
	if len(key) > l.MaxKey {
		return fmt.Errorf("%w: %d bytes, limit %d", errs.KeyTooLarge, len(key), l.MaxKey)
	}
	return nil
}

// CheckPrefix refuses an oversized prefix.
func (l Limits) CheckPrefix(prefix string) error {
	if len(prefix) > l.MaxKey {
		return fmt.Errorf("%w: prefix of %d bytes, limit %d", errs.KeyTooLarge, len(prefix), l.MaxKey)
	}
	return nil
}

// CheckList checks a List of prefix with o: the prefix, and the page.
func (l Limits) CheckList(prefix string, o ReadOptions) error {
	if err := l.CheckPrefix(prefix); err != nil {
		return err
	}
	switch {
	case o.Limit < 0:
		return fmt.Errorf("%w: Limit(%d): a page holds at least one key (0: no limit)", errs.InvalidArgument, o.Limit)
	case o.Limit > MaxListLimit:
		return fmt.Errorf("%w: Limit(%d): at most %d", errs.InvalidArgument, o.Limit, MaxListLimit)
	case len(o.After) > l.MaxKey:
		return fmt.Errorf("%w: After a key of %d bytes, limit %d", errs.KeyTooLarge, len(o.After), l.MaxKey)
	case len(o.End) > l.MaxKey:
		return fmt.Errorf("%w: Range end of %d bytes, limit %d", errs.KeyTooLarge, len(o.End), l.MaxKey)
	}
	return CheckRanged(o)
}

// PrefixEnd is the least key after every key under prefix, or "" when
// there is none (prefix "" or all 0xff bytes): the end of a prefix read
// as a range.
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

// CheckRanged checks the ranged read's options of o, for Get and List.
func CheckRanged(o ReadOptions) error {
	switch {
	case o.Rev < 0:
		return fmt.Errorf("%w: WithRev(%d): revisions start at 1 (0: the current one)", errs.InvalidArgument, o.Rev)
	case o.SortTarget > MaxSortTarget:
		return fmt.Errorf("%w: sort target %d", errs.InvalidArgument, o.SortTarget)
	case o.MinModRev < 0 || o.MaxModRev < 0 || o.MinCreateRev < 0 || o.MaxCreateRev < 0:
		return fmt.Errorf("%w: a revision filter below 0", errs.InvalidArgument)
	}
	return nil
}

// CheckTxn checks every key, prefix and value of t and its size, and
// that no branch writes a key twice: Put and Delete are transactions
// too, so this is the one check of every write. A nested transaction
// (OpTxn) counts with everything in it against MaxTxnOps, nests at most
// command.MaxNesting deep, and its ops and compares are checked as the
// top's; its writes count as its branch's for the duplicate rule (etcd's).
func (l Limits) CheckTxn(t *command.Txn) error {
	if ops := t.Size(); ops > l.MaxTxnOps {
		return fmt.Errorf("%w: %d, limit %d (a nested transaction's compares and ops count too)", errs.TooManyOps, ops, l.MaxTxnOps)
	}
	if d := t.Depth(); d > command.MaxNesting {
		return fmt.Errorf("%w: transactions nested %d deep, limit %d", errs.TooManyOps, d, command.MaxNesting)
	}
	if err := checkNested(t, true); err != nil {
		return err
	}
	for op := range t.AllOps() {
		if op.Type < command.OpGet || op.Type > command.OpDelete || op.Type == command.OpPut && op.Prefix {
			return fmt.Errorf("%w: operation of type %d (prefix %v)", errs.InvalidArgument, op.Type, op.Prefix)
		}
	}
	for _, ops := range [][]command.Op{t.Then, t.Else} {
		// As etcd refuses it ("duplicate key given in txn request"): the
		// outcome would depend on the order of the operations.
		if key, dup := command.DuplicateWrite(ops); dup {
			return fmt.Errorf("%w: a branch of the transaction writes %q twice (a key may be put once, "+
				"and not also deleted, in one branch and the transactions it nests)", errs.InvalidArgument, key)
		}
	}
	if err := l.checkCompares(t); err != nil {
		return err
	}
	for o := range t.AllOps() {
		check := l.CheckKey
		if o.Prefix {
			check = l.CheckPrefix
		}
		if err := check(o.Key); err != nil {
			return err
		}
		if len(o.Value) > l.MaxValue {
			return fmt.Errorf("%w: %d bytes, limit %d", errs.ValueTooLarge, len(o.Value), l.MaxValue)
		}
	}
	return nil
}

// checkNested refuses an OpTxn that carries what it cannot (a key, a
// value, a prefix or a session, which its encoding drops) or no
// transaction, and a nested transaction with the top's own fields (an
// actor, a read limit).
func checkNested(t *command.Txn, top bool) error {
	if !top && (t.Actor != "" || t.Admin || t.ReadLimit != 0) {
		return fmt.Errorf("%w: a nested transaction with an actor or a read limit (only the top one has them)", errs.InvalidArgument)
	}
	for _, ops := range [][]command.Op{t.Then, t.Else} {
		for i := range ops {
			op := &ops[i]
			if op.Type != command.OpTxn {
				continue
			}
			if op.Txn == nil || op.Key != "" || op.Value != nil || op.Prefix || op.Session != 0 {
				return fmt.Errorf("%w: a nested transaction op with a key, value or session, or without its transaction", errs.InvalidArgument)
			}
			if err := checkNested(op.Txn, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkCompares checks the keys of t's compares and of those of the
// transactions it nests.
func (l Limits) checkCompares(t *command.Txn) error {
	for _, c := range t.If {
		if err := l.CheckKey(c.Key); err != nil {
			return err
		}
	}
	for _, ops := range [][]command.Op{t.Then, t.Else} {
		for i := range ops {
			if op := &ops[i]; op.Type == command.OpTxn && op.Txn != nil {
				if err := l.checkCompares(op.Txn); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// CheckWatch refuses a watch that could never work, before it starts.
func (l Limits) CheckWatch(prefix string, o *WatchOptions) error {
	if err := l.CheckPrefix(prefix); err != nil {
		return err
	}
	switch {
	case o.FromRev < 0:
		return fmt.Errorf("%w: FromRev(%d): revisions start at 0", errs.InvalidArgument, o.FromRev)
	case o.MaxLag < 0:
		return fmt.Errorf("%w: WithMaxLag(%d) is negative", errs.InvalidArgument, o.MaxLag)
	case o.Exact && o.Range:
		return fmt.Errorf("%w: ExactKey and WatchRange together", errs.InvalidArgument)
	case o.Exact && prefix == "":
		return fmt.Errorf("%w: ExactKey of the empty key", errs.InvalidKey)
	case len(o.End) > l.MaxKey:
		return fmt.Errorf("%w: WatchRange end of %d bytes, limit %d", errs.KeyTooLarge, len(o.End), l.MaxKey)
	}
	return nil
}

// CheckSessionTTL refuses a TTL below min or above max (0 = no maximum).
func CheckSessionTTL(ttl, min, max time.Duration) error {
	switch {
	case ttl < min:
		return fmt.Errorf("%w: %v is below the minimum %v (four election timeouts)", errs.InvalidTTL, ttl, min)
	case max > 0 && ttl > max:
		return fmt.Errorf("%w: %v is above the maximum %v (Config.MaxSessionTTL)", errs.InvalidTTL, ttl, max)
	}
	return nil
}

// MinSessionTTL is the shortest session TTL for election timeout et:
// four election timeouts (see the root's MinSessionTTL).
func MinSessionTTL(et time.Duration) time.Duration { return 4 * et }

// Margin is how much earlier than the cell a holder counts a session of
// ttl as expired, for election timeout et: 2% of the TTL for the
// difference in clock rates between machines, and a quarter election
// timeout because the holder looks at its deadline once per tick (so
// Done closes at most a tick after Until). One rule for a member's
// sessions and a client's alike: a client's send precedes the leader's
// receipt, so the same bound holds one hop further out.
func Margin(et, ttl time.Duration) time.Duration { return et/4 + ttl/50 }

// Commit checks txn against b's limits and proposes it: the one path of
// every write. prop is the proposer the caller asked for (an idempotency
// key), nil for the backend's own.
func Commit(ctx context.Context, b Backend, txn *command.Txn, prop *command.Proposer) (command.Result, error) {
	if err := b.Limits().CheckTxn(txn); err != nil {
		return command.Result{}, err
	}
	return b.Propose(ctx, &command.Command{Kind: command.KindTxn, Txn: txn, Proposer: prop})
}

// Get reads key through b, checked against its limits; ErrNotFound when
// it does not exist.
func Get(ctx context.Context, b Backend, key string, o ReadOptions) (command.KV, error) {
	if err := b.Limits().CheckKey(key); err != nil {
		return command.KV{}, err
	}
	if err := CheckGet(key, o); err != nil {
		return command.KV{}, err
	}
	kv, ok, err := b.Get(ctx, key, o)
	if err != nil {
		return command.KV{}, err
	}
	if !ok {
		return command.KV{}, fmt.Errorf("%w: %q", errs.NotFound, key)
	}
	return kv, nil
}

// CheckGet refuses the options a Get of key does not take: it reads one
// key, so only Serializable, WithRev and KeysOnly apply.
func CheckGet(key string, o ReadOptions) error {
	if o.Paged() {
		return fmt.Errorf("%w: Get(%q) with Limit or After: they page a List", errs.InvalidArgument, key)
	}
	if !o.PointOnly() {
		return fmt.Errorf("%w: Get(%q) takes Serializable, WithRev and KeysOnly; ranges, counts, sorts and filters are List's",
			errs.InvalidArgument, key)
	}
	return CheckRanged(o)
}

// List reads the page o asks for of prefix through b, checked against
// its limits.
func List(ctx context.Context, b Backend, prefix string, o ReadOptions) ([]command.KV, int64, error) {
	if err := b.Limits().CheckList(prefix, o); err != nil {
		return nil, 0, err
	}
	return b.List(ctx, prefix, o)
}

// Bounds on a write's names, checked alike by the root (a WriteID read
// back, an IdempotencyKey) and by a member serving clients.
const (
	// MaxIdempotencyKey bounds an idempotency key, in bytes.
	MaxIdempotencyKey = 256
	// MaxClientIdentity bounds a client's identity in bytes: it is stored
	// with each session the client creates.
	MaxClientIdentity = 256
	// ClientOwnerPrefix makes a client's owner name: a client can never
	// pass for a member's own sessions, whose owner is "".
	ClientOwnerPrefix = "client:"
)
