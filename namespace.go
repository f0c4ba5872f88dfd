package coord

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coordcell/coord/internal/lockq"
	"github.com/coordcell/coord/internal/spi"
)

// Namespace returns a Cell whose key space is the keys of c under
// prefix, as etcd's clientv3/namespace does: the KV calls (Get, List,
// Put, Delete, Txn with its Ops and Cmps, Watch, ListWatch) prepend
// prefix to every key and prefix they are given and strip it from every
// key they return (results, events, previous values). List(""),
// OpDeletePrefix("") and Watch("") cover exactly the namespace.
//
// Sessions, leases (Acquire, CheckToken) and every recipe made through
// the namespace (Mutex, Election, ...) keep their keys where they always
// are, under locks/ and elections/, outside every namespace: the same
// lock is the same lock whichever namespace it is taken through, and no
// delete in a namespace can touch a lock or an election. A Cmp a recipe
// hands out (Mutex.IsOwner) keeps naming its recipe's key inside a
// namespace's Txn.
//
// prefix must not be empty and must not overlap the recipes' keys (be a
// prefix of "locks/" or "elections/", or start with one): such a
// namespace would reach locks and elections, so every call on it fails
// with ErrInvalidArgument and changes nothing. Key-size limits apply to
// the full key, prefix included (ErrKeyTooLarge). Namespaces nest:
// Namespace(Namespace(c, "a/"), "b/") is Namespace(c, "a/b/").
func Namespace(c Cell, prefix string) Cell {
	ns := &namespaceCell{c: c, prefix: prefix}
	if in, ok := c.(*namespaceCell); ok {
		ns.c, ns.prefix, ns.err = in.c, in.prefix+prefix, in.err
	}
	if ns.err == nil {
		ns.err = checkNamespace(ns.prefix)
	}
	return ns
}

// checkNamespace refuses a namespace prefix that covers, or lies inside,
// the recipes' key space.
func checkNamespace(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("%w: empty namespace prefix: the namespace would be every key, locks and elections included",
			ErrInvalidArgument)
	}
	for _, r := range recipeKeySpaces() {
		if strings.HasPrefix(r, prefix) || strings.HasPrefix(prefix, r) {
			return fmt.Errorf("%w: namespace prefix %q overlaps the recipes' keys under %q",
				ErrInvalidArgument, prefix, r)
		}
	}
	return nil
}

// recipeKeySpaces are the prefixes the recipes keep their keys under,
// which no namespace may reach.
func recipeKeySpaces() []string {
	return []string{
		strings.TrimSuffix(lockq.LockSpace, "/"),
		strings.TrimSuffix(lockq.ElectionSpace, "/"),
	}
}

// nsKey refuses an empty key in a namespace, which would otherwise name
// the namespace's prefix itself.
func nsKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	return nil
}

// namespaceCell is the Cell Namespace returns. c is never itself a
// namespaceCell: nesting is flattened into prefix.
type namespaceCell struct {
	c      Cell
	prefix string
	err    error // why the namespace is refused; nil if it is valid
}

var _ Cell = (*namespaceCell)(nil)

// check refuses a call on a refused namespace, and a prefix that alone
// is over the key-size limit.
func (ns *namespaceCell) check() error {
	if ns.err != nil {
		return ns.err
	}
	return ns.cell().limits().CheckPrefix(ns.prefix)
}

func (ns *namespaceCell) strip(kv KV) KV {
	kv.Key = strings.TrimPrefix(kv.Key, ns.prefix)
	return kv
}

// stripAll returns kvs with their keys in the namespace, in a new slice:
// a cached listing may share its slice.
func (ns *namespaceCell) stripAll(kvs []KV) []KV {
	out := make([]KV, len(kvs))
	for i, kv := range kvs {
		out[i] = ns.strip(kv)
	}
	return out
}

// stripEvent returns ev with its keys in the namespace. PrevKV is
// copied: a watch shared by several watchers shares it too.
func (ns *namespaceCell) stripEvent(ev Event) Event {
	if ev.Type == EventProgress {
		return ev
	}
	ev.KV = ns.strip(ev.KV)
	if ev.PrevKV != nil {
		prev := ns.strip(*ev.PrevKV)
		ev.PrevKV = &prev
	}
	return ev
}

// Get is c.Get of the key in the namespace.
func (ns *namespaceCell) Get(ctx context.Context, key string, opts ...ReadOption) (KV, error) {
	if err := ns.check(); err != nil {
		return KV{}, err
	}
	if err := nsKey(key); err != nil {
		return KV{}, err
	}
	kv, err := ns.c.Get(ctx, ns.prefix+key, opts...)
	return ns.strip(kv), err
}

// List is c.List of the prefix in the namespace, keys stripped; After's
// key is in the namespace too.
func (ns *namespaceCell) List(ctx context.Context, prefix string, opts ...ReadOption) ([]KV, int64, error) {
	if err := ns.check(); err != nil {
		return nil, 0, err
	}
	opts = append(slices.Clip(opts), func(o *readOptions) {
		if o.After != "" {
			o.After = ns.prefix + o.After
		}
		// A range ends within the namespace: "\x00" (every key from
		// the start) at its end, "" (the key alone) as it is.
		switch {
		case !o.Range || o.End == "":
		case o.End == "\x00":
			if o.End = spi.PrefixEnd(ns.prefix); o.End == "" {
				o.End = "\x00"
			}
		default:
			o.End = ns.prefix + o.End
		}
	})
	kvs, rev, err := ns.c.List(ctx, ns.prefix+prefix, opts...)
	if err != nil {
		return nil, 0, err
	}
	return ns.stripAll(kvs), rev, nil
}

// Put is c.Put of the key in the namespace.
func (ns *namespaceCell) Put(ctx context.Context, key string, value []byte, opts ...WriteOption) (KV, error) {
	if err := ns.check(); err != nil {
		return KV{}, err
	}
	if err := nsKey(key); err != nil {
		return KV{}, err
	}
	kv, err := ns.c.Put(ctx, ns.prefix+key, value, opts...)
	return ns.strip(kv), err
}

// Delete is c.Delete of the key in the namespace.
func (ns *namespaceCell) Delete(ctx context.Context, key string, opts ...WriteOption) (int64, error) {
	if err := ns.check(); err != nil {
		return 0, err
	}
	if err := nsKey(key); err != nil {
		return 0, err
	}
	return ns.c.Delete(ctx, ns.prefix+key, opts...)
}

// Txn is c.Txn with its keys in the namespace (see Txn.prefix).
func (ns *namespaceCell) Txn(ctx context.Context) *Txn {
	t := ns.c.Txn(ctx)
	t.prefix = ns.prefix
	t.note(ns.check())
	return t
}

// Watch is c.Watch of the prefix in the namespace, relayed with the
// keys stripped.
func (ns *namespaceCell) Watch(ctx context.Context, prefix string, opts ...WatchOption) *Watcher {
	if err := ns.check(); err != nil {
		return failedWatcher(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	return relayWatch(ctx, cancel, ns.c.Watch(ctx, ns.prefix+prefix, ns.watchRange(opts)...), ns.stripEvent)
}

// ListWatch is c.ListWatch of the prefix in the namespace, keys
// stripped before each callback.
func (ns *namespaceCell) ListWatch(ctx context.Context, prefix string, onList func(kvs []KV, rev int64) error,
	onEvent func(Event) error, opts ...WatchOption) error {
	if err := ns.check(); err != nil {
		return err
	}
	return ns.c.ListWatch(ctx, ns.prefix+prefix,
		func(kvs []KV, rev int64) error { return onList(ns.stripAll(kvs), rev) },
		func(ev Event) error { return onEvent(ns.stripEvent(ev)) },
		ns.watchRange(opts)...)
}

// watchRange ends a WatchRange within the namespace, as List's Range.
func (ns *namespaceCell) watchRange(opts []WatchOption) []WatchOption {
	return append(slices.Clip(opts), func(o *watchOptions) {
		switch {
		case !o.Range:
		case o.End == "\x00":
			if o.End = spi.PrefixEnd(ns.prefix); o.End == "" {
				o.End = "\x00"
			}
		default:
			o.End = ns.prefix + o.End
		}
	})
}

// NewSession makes a session as c does; its recipes' keys are outside
// the namespace, and its Cell is the namespace. The session calls are
// refused only for a namespace overlapping the recipes: they use no key
// of the namespace, so its size does not matter to them.
func (ns *namespaceCell) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	if err := ns.err; err != nil {
		return nil, err
	}
	o := sessionOptions{ttl: DefaultSessionTTL}
	for _, f := range opts {
		f(&o)
	}
	return newSession(ctx, ns, o)
}

// Acquire is c.Acquire: the lease's lock is outside the namespace.
func (ns *namespaceCell) Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := ns.err; err != nil {
		return nil, err
	}
	return acquireLease(ctx, ns, name, ttl)
}

// CheckToken is c.CheckToken: the lock is outside the namespace.
func (ns *namespaceCell) CheckToken(ctx context.Context, name string, t Token) error {
	if err := ns.err; err != nil {
		return err
	}
	return ns.c.CheckToken(ctx, name, t)
}

// MinSessionTTL is c's.
func (ns *namespaceCell) MinSessionTTL() time.Duration { return ns.c.MinSessionTTL() }

// cellBackend is c's: the recipes work on absolute keys.
func (ns *namespaceCell) cell() *cellOps { return ns.c.cell() }
