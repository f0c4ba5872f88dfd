// Package frontcell runs coord behind its etcd front: a coordcell cell
// (three members in this process, TCP on loopback, data on disk, default
// timings) with etcdapi.Serve on each member, on a loopback port of its
// own, plaintext as etcd's client URLs are in the bench. An unchanged
// clientv3 client talks to it as it talks to etcd (the etcd-* scenarios).
package frontcell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/bench/internal/coordcell"
	"github.com/coordcell/coord/etcdapi"
)

// Cell is a coord cell whose members serve the etcd v3 API. Everything
// but EtcdEndpoints and Close is the coordcell cell's, so the scenarios
// still preload and count fsyncs in-process.
type Cell struct {
	*coordcell.Cell
	eps    []string
	cancel context.CancelFunc
	served chan error // one result per Serve
}

var (
	_ cell.Cell       = (*Cell)(nil)
	_ cell.EtcdServer = (*Cell)(nil)
	_ cell.Fsyncer    = (*Cell)(nil)
)

// Open starts a coord cell (coordcell.Open) and serves etcdapi on each of
// its members, and returns once both are up.
func Open(ctx context.Context, opts cell.Options) (cell.Cell, error) {
	cc, err := coordcell.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	inner, ok := cc.(*coordcell.Cell)
	if !ok {
		cc.Close()
		return nil, fmt.Errorf("coordcell.Open returned a %T", cc)
	}
	// The front's own warnings (a call it refused, a lease it let go)
	// are worth seeing in the bench's stderr; its info lines are not.
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sctx, cancel := context.WithCancel(context.Background())
	c := &Cell{Cell: inner, cancel: cancel, served: make(chan error, cell.Members)}
	started := 0
	for m := range cell.Members {
		n, err := inner.Node(m)
		var l net.Listener
		if err == nil {
			l, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if err != nil {
			c.stop(started)
			return nil, fmt.Errorf("etcd front of coord member %d: %w", m, err)
		}
		c.eps = append(c.eps, "http://"+l.Addr().String())
		started++
		go func() { c.served <- etcdapi.Serve(sctx, n, l, etcdapi.WithLogger(lg)) }()
	}
	return c, nil
}

// EtcdEndpoints returns each member's etcd front.
func (c *Cell) EtcdEndpoints() []string { return slices.Clone(c.eps) }

// Close stops the fronts (each ends its calls and connections), then the
// cell.
func (c *Cell) Close() error { return c.stop(len(c.eps)) }

// stop stops the fronts, waiting for the served ones, then the cell.
func (c *Cell) stop(served int) error {
	c.cancel()
	var errs []error
	for range served {
		if err := <-c.served; err != nil {
			errs = append(errs, fmt.Errorf("etcd front: %w", err))
		}
	}
	c.eps = nil // a second Close waits for nothing
	errs = append(errs, c.Cell.Close())
	return errors.Join(errs...)
}
