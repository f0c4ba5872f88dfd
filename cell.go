package coord

import (
	"context"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
)

// Cell is what user code and the recipes need of a cell, whichever way
// this process reaches it: as a member (*Node) or as a process that is
// not a member (*Client). Write code against Cell and it works with
// either; sessions, locks, elections, semaphores, leases and watches
// made through a Cell behave the same on both.
//
// Cell is sealed: only this package implements it, because the recipes
// rely on more than its public methods (the batched keep-alive, the
// input limits).
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

	// cell seals the interface and gives the recipes their way in.
	cell() *cellOps
}

var (
	_ Cell = (*Node)(nil)
	_ Cell = (*Client)(nil)
)

// cellOps is the one implementation of the Cell API, over the process's
// way into the cell (an spi.Backend: a member's own, or a client's that
// forwards to its member). *Node and *Client embed it, so every Cell
// method, and every recipe, is written once: input is validated here,
// against the backend's limits, before anything is sent.
type cellOps struct {
	b spi.Backend
	// self is the Cell that embeds this one (the *Node or *Client): what
	// a Session made through it reports as its Cell.
	self Cell
	// node is the member behind b; nil for a client's.
	node *Node
}

func (c *cellOps) cell() *cellOps { return c }

// The backend as the recipes use it, in the root's types.

func (c *cellOps) propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	res, err := c.b.Propose(ctx, cmd)
	return res, ambiguousOf(err)
}

func (c *cellOps) electionTimeout() time.Duration { return c.b.ElectionTimeout() }

func (c *cellOps) limits() spi.Limits { return c.b.Limits() }

func (c *cellOps) keeper() spi.Keeper { return c.b.Keeper() }

func (c *cellOps) queueProbes() *spi.Probes { return c.b.Probes() }

func (c *cellOps) settle(ctx context.Context) { c.b.Settle(ctx) }

func (c *cellOps) get(ctx context.Context, key string, o readOptions) (KV, bool, error) {
	kv, ok, err := c.b.Get(ctx, key, o)
	return fromCmdKV(kv), ok, err
}

func (c *cellOps) list(ctx context.Context, prefix string, o readOptions) ([]KV, int64, error) {
	kvs, rev, err := c.b.List(ctx, prefix, o)
	if err != nil {
		return nil, 0, err
	}
	return fromCmdKVs(kvs), rev, nil
}

func fromCmdKVs(kvs []command.KV) []KV {
	out := make([]KV, len(kvs))
	for i, kv := range kvs {
		out[i] = fromCmdKV(kv)
	}
	return out
}

// The recipes retry what failed for want of a quorum, or with an unknown
// outcome, rather than hand every caller a loop: spi's one helper and its
// one wait (a quarter election timeout), here with a Session.

// retry is spi.Retry on b, stopping when the session s (nil: none) ends.
func retry(ctx context.Context, b *cellOps, s *Session, again func(error) bool, op func() error) error {
	return spi.Retry(ctx, b.b, s.liveness(), again, op)
}

// backoff is spi.Backoff on b, ending early when the session s (nil:
// none) ends.
func backoff(ctx context.Context, b *cellOps, s *Session) error {
	return spi.Backoff(ctx, b.b, s.liveness())
}

// retryable reports whether an operation that failed with err may
// succeed if tried again (spi.Retryable).
func retryable(err error) bool { return spi.Retryable(err) }

// notClosed retries everything but the end of the process's way into the
// cell (spi.NotClosed).
func notClosed(err error) bool { return spi.NotClosed(err) }

// liveness is s's, nil for no session.
func (s *Session) liveness() *spi.Session {
	if s == nil {
		return nil
	}
	return s.live
}
