package coordcell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/bench/internal/cell"
)

var (
	_ cell.Connector   = (*Cell)(nil)
	_ cell.TrafficCell = (*Cell)(nil)
)

// Connect connects a coord.Client called name to member m's client port
// (plaintext loopback TCP), and to it alone, so the bench knows which
// member serves it. Its connections count their frames (Traffic).
func (c *Cell) Connect(ctx context.Context, m int, name string) (cell.Client, error) {
	n, err := c.node(m)
	if err != nil {
		return nil, err
	}
	cl, err := Dial(ctx, n.Admin().ClientAddr(), name)
	if err != nil {
		return nil, fmt.Errorf("coord client %s to member %d: %w", name, m, err)
	}
	return cl, nil
}

// Dial connects a coord.Client called name to the member whose client
// port is addr (plaintext loopback TCP), and to it alone. Its
// connections count their frames (Traffic).
func Dial(ctx context.Context, addr, name string) (cell.Client, error) {
	cl := &client{}
	var d net.Dialer
	var err error
	cl.c, err = coord.Connect(ctx, coord.ClientConfig{
		Name:    name,
		Members: []string{addr},
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: conn, out: &cl.out, in: &cl.in}, nil
		},
		// Info: why a client left its member (under load) is worth
		// seeing in the bench's stderr.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return nil, fmt.Errorf("coord client %s at %s: %w", name, addr, err)
	}
	return cl, nil
}

// client adapts a *coord.Client to cell.Client and counts the frames of
// its connections.
type client struct {
	c       *coord.Client
	out, in frameCounter
}

var (
	_ cell.TrafficClient = (*client)(nil)
	_ cell.WatchHolder   = (*client)(nil)
)

func (cl *client) Put(ctx context.Context, key string, value []byte) error {
	_, err := cl.c.Put(ctx, key, value)
	return err
}

func (cl *client) Get(ctx context.Context, key string) error {
	_, err := cl.c.Get(ctx, key)
	if errors.Is(err, coord.ErrNotFound) {
		err = nil
	}
	return err
}

func (cl *client) NewSession(ctx context.Context, ttl time.Duration) (cell.Session, error) {
	return newSession(ctx, cl.c, ttl)
}

// Watch returns once the member has taken the watch on (Ready): unlike a
// member's own watch, a client's is established over the network.
func (cl *client) Watch(ctx context.Context, prefix string, fn func(key string)) error {
	w := watch(ctx, cl.c, prefix, fn)
	select {
	case <-w.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	return w.Err()
}

// HoldWatch starts a watch of prefix that nothing reads, and returns
// once the member has taken it on.
func (cl *client) HoldWatch(ctx context.Context, prefix string) error {
	w := cl.c.Watch(ctx, prefix)
	select {
	case <-w.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	return w.Err()
}

func (cl *client) Close() error { return cl.c.Close() }

// Traffic returns the client's frame counts so far.
func (cl *client) Traffic() cell.ClientTraffic {
	out, in := cl.out.read(), cl.in.read()
	return cell.ClientTraffic{
		Link:        cell.Link{FramesOut: out.frames, FramesIn: in.frames, BytesOut: out.bytes, BytesIn: in.bytes},
		KeepAlives:  out.keepAlives,
		WatchEvents: in.watchEvents, WatchEventBytes: in.watchEventBytes,
	}
}

// newSession creates a session through cc (a member or a client).
func newSession(ctx context.Context, cc coord.Cell, ttl time.Duration) (cell.Session, error) {
	s, err := cc.NewSession(ctx, coord.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return &session{s: s}, nil
}

// watch starts a watch of prefix through cc, calling fn with the key of
// every change from one goroutine, which ends with the watch.
func watch(ctx context.Context, cc coord.Cell, prefix string, fn func(key string)) *coord.Watcher {
	w := cc.Watch(ctx, prefix)
	go func() {
		for ev := range w.Events() {
			if ev.Type != coord.EventProgress {
				fn(ev.KV.Key)
			}
		}
	}()
	return w
}
