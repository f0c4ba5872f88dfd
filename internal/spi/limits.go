package spi

import (
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
	}
	return nil
}

// CheckTxn checks every key, prefix and value of t and its size, and
// that no branch writes a key twice: Put and Delete are transactions
// too, so this is the one check of every write.
func (l Limits) CheckTxn(t *command.Txn) error {
	if ops := len(t.If) + len(t.Then) + len(t.Else); ops > l.MaxTxnOps {
		return fmt.Errorf("%w: %d, limit %d", errs.TooManyOps, ops, l.MaxTxnOps)
	}
	for _, ops := range [][]command.Op{t.Then, t.Else} {
		for _, o := range ops {
			if o.Type < command.OpGet || o.Type > command.OpDelete || o.Type == command.OpPut && o.Prefix {
				return fmt.Errorf("%w: operation of type %d (prefix %v)", errs.InvalidArgument, o.Type, o.Prefix)
			}
		}
		// As etcd refuses it ("duplicate key given in txn request"): the
		// outcome would depend on the order of the operations.
		if key, dup := command.DuplicateWrite(ops); dup {
			return fmt.Errorf("%w: a branch of the transaction writes %q twice (a key may be put once, "+
				"and not also deleted, in one branch)", errs.InvalidArgument, key)
		}
	}
	for _, c := range t.If {
		if err := l.CheckKey(c.Key); err != nil {
			return err
		}
	}
	for _, ops := range [][]command.Op{t.Then, t.Else} {
		for _, o := range ops {
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
