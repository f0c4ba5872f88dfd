package etcdcell

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

var (
	_ cell.Connector  = (*Cell)(nil)
	_ cell.EtcdServer = (*Cell)(nil)
)

// EtcdEndpoints returns the members' client URLs, served whatever the
// cell's ClientMode (in-process mode only calls the members another way).
func (c *Cell) EtcdEndpoints() []string { return slices.Clone(c.curls[:]) }

// Connect dials member m's client URL over loopback with etcd's gRPC
// client, whatever the cell's ClientMode: a process that is not a member
// talks to etcd this way. name is unused (etcd's clients are anonymous
// here).
func (c *Cell) Connect(ctx context.Context, m int, name string) (cell.Client, error) {
	if _, err := c.client(m); err != nil {
		return nil, err
	}
	cl, err := Dial(ctx, c.curls[m], name)
	if err != nil {
		return nil, fmt.Errorf("etcd client %s to member %d: %w", name, m, err)
	}
	return cl, nil
}

// Dial connects etcd's gRPC client to the member whose client URL is url
// ("http://host:port"); name is unused.
func Dial(ctx context.Context, url, name string) (cell.Client, error) {
	cl, err := clientv3.New(clientv3.Config{
		Endpoints: []string{url}, DialTimeout: 5 * time.Second, Context: context.Background(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client %s at %s: %w", name, url, err)
	}
	return &client{c: cl}, nil
}

var _ cell.WatchHolder = (*client)(nil)

// HoldWatch starts a watch of prefix that nothing reads, and returns once
// etcd has confirmed it.
func (cl *client) HoldWatch(ctx context.Context, prefix string) error {
	wch := cl.c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-wch:
		if !ok {
			return fmt.Errorf("etcd watch of %q ended at once: %w", prefix, ctx.Err())
		}
		return resp.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// client adapts a gRPC clientv3 to cell.Client.
type client struct{ c *clientv3.Client }

func (cl *client) Put(ctx context.Context, key string, value []byte) error {
	_, err := cl.c.Put(ctx, key, string(value))
	return err
}

func (cl *client) Get(ctx context.Context, key string) error {
	_, err := cl.c.Get(ctx, key)
	return err
}

func (cl *client) NewSession(ctx context.Context, ttl time.Duration) (cell.Session, error) {
	return newSession(ctx, cl.c, ttl)
}

func (cl *client) Watch(ctx context.Context, prefix string, fn func(key string)) error {
	return watch(ctx, cl.c, prefix, fn)
}

func (cl *client) Close() error { return cl.c.Close() }

// newSession grants a lease of ttl (rounded up to whole seconds, etcd's
// unit) through cl and keeps it alive from cl.
func newSession(ctx context.Context, cl *clientv3.Client, ttl time.Duration) (cell.Session, error) {
	secs := int64(math.Ceil(ttl.Seconds()))
	// Grant under ctx; the keep-alive then runs under the client's own
	// context (concurrency.NewSession would tie it to ctx).
	lease, err := cl.Grant(ctx, secs)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cl, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(secs)))
	if err != nil {
		return nil, err
	}
	return &session{s: s}, nil
}

// watch watches prefix through cl, and returns once etcd has confirmed
// that the watch is created; fn runs on one goroutine, which ends with
// the watch.
func watch(ctx context.Context, cl *clientv3.Client, prefix string, fn func(key string)) error {
	wch := cl.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-wch:
		if !ok {
			return fmt.Errorf("etcd watch of %q ended at once: %w", prefix, ctx.Err())
		}
		if err := resp.Err(); err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				fn(string(ev.Kv.Key))
			}
		}
	}()
	return nil
}
