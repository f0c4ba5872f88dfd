package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
)

// Cell is what user code and the recipes need of a cell, whichever way
// this process reaches it: as a member (*Node) or, once clients exist, as
// a process that is not a member. Write code against Cell and it works
// with either; sessions, locks, elections, semaphores, leases and watches
// made through a Cell behave the same on both.
//
// Cell is sealed: only this package implements it, because the recipes
// rely on more than its public methods (the member's batched keep-alive,
// its applied state). Each method is documented on *Node.
type Cell interface {
	Get(ctx context.Context, key string, opts ...ReadOption) (KV, error)
	List(ctx context.Context, prefix string, opts ...ReadOption) ([]KV, int64, error)
	Put(ctx context.Context, key string, value []byte, opts ...WriteOption) (KV, error)
	Delete(ctx context.Context, key string, opts ...WriteOption) (int64, error)
	Txn(ctx context.Context) *Txn
	Watch(ctx context.Context, prefix string, opts ...WatchOption) *Watcher
	ListWatch(ctx context.Context, prefix string, onList func(kvs []KV, rev int64) error,
		onEvent func(Event) error, opts ...WatchOption) error
	NewSession(ctx context.Context, opts ...SessionOption) (*Session, error)
	Acquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error)
	CheckToken(ctx context.Context, name string, t Token) error
	MinSessionTTL() time.Duration

	// cellBackend seals the interface and gives the recipes their
	// backend.
	cellBackend() backend
}

var _ Cell = (*Node)(nil)

// backend is what the shared code (the KV calls, Txn, Watch, ListWatch,
// Session and every recipe) needs of the process's way into the cell. A
// member is its own backend; a client's backend forwards to its member.
// Input is validated before it reaches a backend (see limits), so a
// client validates exactly as a member does, and a backend only carries
// the request.
type backend interface {
	// propose runs cmd through Raft and maps the state machine's status
	// to the package's errors.
	propose(ctx context.Context, cmd *command.Command) (command.Result, error)
	// get reads one key; ok is false when it does not exist.
	get(ctx context.Context, key string, o readOptions) (kv KV, ok bool, err error)
	// list reads the keys under prefix, in key order (the page o asks
	// for, already validated), and the revision read at.
	list(ctx context.Context, prefix string, o readOptions) ([]KV, int64, error)
	// watch starts a watch of prefix with o, already validated; o.fromSet
	// false means from the backend's current revision, o.maxLagSet false
	// means its default lag.
	watch(ctx context.Context, prefix string, o watchOptions) *Watcher
	// settle waits (briefly, bounded) until every change the backend has
	// delivered to watchers has also reached its sessions, so a session
	// ended by a change a watcher saw knows it has ended.
	settle(ctx context.Context)
	// electionTimeout is the cell's election timeout: the unit of every
	// retry and session bound.
	electionTimeout() time.Duration
	// limits are the cell's input limits.
	limits() limits
	// keeper keeps this process's sessions alive.
	keeper() keeper
	// queueProbes counts queue waits for the package's tests; never nil.
	queueProbes() *probeRegistry
}

// keeper is the keep-alive engine behind Session: a member batches its
// sessions' keep-alives to the leader; a client's folds them into its
// member's batch.
type keeper interface {
	// add starts keeping s alive (unless s is manual: renew only).
	add(s *Session)
	// remove stops keeping the session alive.
	remove(id SessionID)
	// renew sends a keep-alive for s now and waits until one is confirmed;
	// it returns s's new Until.
	renew(ctx context.Context, s *Session) (time.Time, error)
	// margin is how much earlier than the cell the holder counts a
	// session of this TTL as expired.
	margin(ttl time.Duration) time.Duration
	// proposeAsync proposes cmd (a session's end) without waiting.
	proposeAsync(cmd *command.Command)
}

// limits are a cell's input limits, checked on the shared path before
// anything is sent.
type limits struct {
	maxKey, maxValue, maxTxnOps int
	// maxSessionTTL is the longest session TTL; 0 = unknown here (a
	// client's: its member checks).
	maxSessionTTL time.Duration
}

func (l limits) checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > l.maxKey {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), l.maxKey)
	}
	return nil
}

func (l limits) checkPrefix(prefix string) error {
	if len(prefix) > l.maxKey {
		return fmt.Errorf("%w: prefix of %d bytes, limit %d", ErrKeyTooLarge, len(prefix), l.maxKey)
	}
	return nil
}

// checkList checks a List of prefix with o: the prefix, and the page.
func (l limits) checkList(prefix string, o readOptions) error {
	if err := l.checkPrefix(prefix); err != nil {
		return err
	}
	switch {
	case o.limit < 0:
		return fmt.Errorf("%w: Limit(%d): a page holds at least one key (0: no limit)", ErrInvalidArgument, o.limit)
	case o.limit > maxListLimit:
		return fmt.Errorf("%w: Limit(%d): at most %d", ErrInvalidArgument, o.limit, maxListLimit)
	case len(o.after) > l.maxKey:
		return fmt.Errorf("%w: After a key of %d bytes, limit %d", ErrKeyTooLarge, len(o.after), l.maxKey)
	}
	return nil
}

// maxListLimit bounds Limit, so it travels to a member in 32 bits; no page
// that long would fit Config.MaxReadBytes anyway.
const maxListLimit = 1<<31 - 1

// checkTxn checks every key, prefix and value of t and its size, and
// that no branch writes a key twice: Put and Delete are transactions
// too, so this is the one check of every write.
func (l limits) checkTxn(t *command.Txn) error {
	if ops := len(t.If) + len(t.Then) + len(t.Else); ops > l.maxTxnOps {
		return fmt.Errorf("%w: %d, limit %d", ErrTooManyOps, ops, l.maxTxnOps)
	}
	for _, ops := range [][]command.Op{t.Then, t.Else} {
		for _, o := range ops {
			if o.Type < command.OpGet || o.Type > command.OpDelete || o.Type == command.OpPut && o.Prefix {
				return fmt.Errorf("%w: operation of type %d (prefix %v)", ErrInvalidArgument, o.Type, o.Prefix)
			}
		}
		// As etcd refuses it ("duplicate key given in txn request"): the
		// outcome would depend on the order of the operations.
		if key, dup := command.DuplicateWrite(ops); dup {
			return fmt.Errorf("%w: a branch of the transaction writes %q twice (a key may be put once, "+
				"and not also deleted, in one branch)", ErrInvalidArgument, key)
		}
	}
	for _, c := range t.If {
		if err := l.checkKey(c.Key); err != nil {
			return err
		}
	}
	for _, ops := range [][]command.Op{t.Then, t.Else} {
		for _, o := range ops {
			check := l.checkKey
			if o.Prefix {
				check = l.checkPrefix
			}
			if err := check(o.Key); err != nil {
				return err
			}
			if len(o.Value) > l.maxValue {
				return fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(o.Value), l.maxValue)
			}
		}
	}
	return nil
}

// checkWatch refuses a watch that could never work, before it starts.
func (l limits) checkWatch(prefix string, o *watchOptions) error {
	if err := l.checkPrefix(prefix); err != nil {
		return err
	}
	switch {
	case o.fromRev < 0:
		return fmt.Errorf("%w: FromRev(%d): revisions start at 0", ErrInvalidArgument, o.fromRev)
	case o.maxLag < 0:
		return fmt.Errorf("%w: WithMaxLag(%d) is negative", ErrInvalidArgument, o.maxLag)
	}
	return nil
}

// --- *Node as a backend ---

func (n *Node) cellBackend() backend { return n }

func (n *Node) limits() limits {
	return limits{maxKey: n.cfg.MaxKeySize, maxValue: n.cfg.MaxValueSize, maxTxnOps: n.cfg.MaxTxnOps,
		maxSessionTTL: n.cfg.MaxSessionTTL}
}

// maxReadBytes is Config.MaxReadBytes, as the storage counts reads.
func (n *Node) maxReadBytes() int64 { return int64(n.cfg.MaxReadBytes) }

func (n *Node) keeper() keeper { return n.sessions }

func (n *Node) queueProbes() *probeRegistry { return &n.probes }

func (n *Node) electionTimeout() time.Duration {
	return time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
}

func (n *Node) get(ctx context.Context, key string, o readOptions) (KV, bool, error) {
	if err := n.readBarrier(ctx, o); err != nil {
		return KV{}, false, err
	}
	kv, ok, err := n.sm.Get(key)
	if err != nil {
		return KV{}, false, n.stateErr(err)
	}
	return fromCmdKV(kv), ok, nil
}

func (n *Node) list(ctx context.Context, prefix string, o readOptions) ([]KV, int64, error) {
	kvs, rev, err := n.listPage(ctx, prefix, o, n.maxReadBytes())
	if err != nil {
		return nil, 0, err
	}
	out := make([]KV, len(kvs))
	for i, kv := range kvs {
		out[i] = fromCmdKV(kv)
	}
	return out, rev, nil
}

// listPage reads the page o asks for of prefix, at most maxBytes of it:
// Node.List's and a client's List alike.
func (n *Node) listPage(ctx context.Context, prefix string, o readOptions, maxBytes int64) ([]command.KV, int64, error) {
	if err := n.readBarrier(ctx, o); err != nil {
		return nil, 0, err
	}
	kvs, rev, err := n.sm.ListPage(prefix, storage.Page{After: o.after, Limit: o.limit, MaxBytes: maxBytes})
	if errors.Is(err, ErrReadTooLarge) {
		return nil, 0, fmt.Errorf("List(%q): %w; page it with Limit and After (or raise Config.MaxReadBytes)", prefix, err)
	}
	if err != nil {
		return nil, 0, n.stateErr(err)
	}
	return kvs, rev, nil
}
