package client

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/transport"
)

// fakeMember serves the client protocol on a loopback listener with a
// Handler whose answers the test chooses.
type fakeMember struct {
	clientwire.Handler // nil: a test calls only what it sets
	proposes           atomic.Int32
	propose            func(n int32, ctx context.Context, c *command.Command) (*command.Result, error)
	read               func(n int32, ctx context.Context, r *clientwire.Read) (*clientwire.ReadResult, error)
	reads              atomic.Int32
	watch              func(ctx context.Context, w *clientwire.WatchStart, sink *clientwire.WatchSink) error
	welcomes           atomic.Int32
	lim                clientwire.Limits // ErrorCode is always CodeOf
	logger             *slog.Logger
}

func (f *fakeMember) Welcome(string, *clientwire.Hello) (*clientwire.Welcome, error) {
	f.welcomes.Add(1)
	return &clientwire.Welcome{Member: "m1", CellID: 1, ElectionTimeout: 500 * time.Millisecond,
		MinSessionTTL: time.Second}, nil
}

func (f *fakeMember) Propose(ctx context.Context, _ string, c *command.Command) (*command.Result, error) {
	return f.propose(f.proposes.Add(1), ctx, c)
}

func (f *fakeMember) Read(ctx context.Context, _ string, r *clientwire.Read) (*clientwire.ReadResult, error) {
	return f.read(f.reads.Add(1), ctx, r)
}

func (f *fakeMember) Watch(ctx context.Context, _ string, w *clientwire.WatchStart, sink *clientwire.WatchSink) error {
	return f.watch(ctx, w, sink)
}

func (f *fakeMember) KeepAlive(ctx context.Context, _ string, ka *clientwire.KeepAlive) (*clientwire.KeepAliveAck, error) {
	return &clientwire.KeepAliveAck{}, nil
}

// serveFake serves f on a listener until the test ends and returns a
// client connected to it.
func serveFake(t *testing.T, f *fakeMember) *Client {
	t.Helper()
	secret := []byte("a client secret of thirty-two bytes or more")
	srvTLS, err := transport.ClientSecretTLS(secret, "m1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				tc := tls.Server(conn, srvTLS)
				if err := tc.HandshakeContext(ctx); err != nil {
					conn.Close()
					return
				}
				lim := f.lim
				lim.ErrorCode = clientwire.CodeOf
				_ = clientwire.Serve(ctx, tc, "alice", f, lim)
			})
		}
	})
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	c, err := Connect(cctx, Config{Name: "alice", Members: []string{ln.Addr().String()}, Secret: secret, Logger: f.logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		ln.Close()
		wg.Wait()
	})
	return c
}

// A member that ends a request itself (its context ended there: it is
// dropping the connection, or stopping) has not answered it. While the
// caller's context lives, the client sends the write again, and its
// proposer makes that safe, rather than call the write ambiguous.
func TestMemberCanceledWriteIsSentAgain(t *testing.T) {
	f := &fakeMember{propose: func(n int32, ctx context.Context, c *command.Command) (*command.Result, error) {
		if n == 1 {
			return nil, context.Canceled
		}
		return &command.Result{Rev: 7}, nil
	}}
	c := serveFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Propose(ctx, putK())
	if err != nil {
		t.Fatalf("write the member ended itself: %v, want it sent again and applied", err)
	}
	if res.Rev != 7 || f.proposes.Load() != 2 {
		t.Fatalf("revision %d after %d proposals, want 7 after 2", res.Rev, f.proposes.Load())
	}
}

// The same for a read: it changes nothing, so it is sent again.
func TestMemberCanceledReadIsSentAgain(t *testing.T) {
	f := &fakeMember{read: func(n int32, ctx context.Context, r *clientwire.Read) (*clientwire.ReadResult, error) {
		if n == 1 {
			return nil, context.Canceled
		}
		return &clientwire.ReadResult{KVs: []command.KV{{Key: r.Key, Value: []byte("v")}}}, nil
	}}
	c := serveFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, ok, err := c.Get(ctx, "k", spi.ReadOptions{})
	if err != nil || !ok {
		t.Fatalf("read the member ended itself: found %v, %v; want it sent again", ok, err)
	}
	if f.reads.Load() != 2 {
		t.Fatalf("%d reads, want 2", f.reads.Load())
	}
}

// When the caller's own context ends, the member's CodeCanceled is the
// end of the caller's request: no resend, and a write is ambiguous.
func TestCallerCanceledWriteIsAmbiguous(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeMember{propose: func(n int32, mctx context.Context, c *command.Command) (*command.Result, error) {
		cancel()
		<-mctx.Done()
		return nil, mctx.Err()
	}}
	c := serveFake(t, f)
	_, err := c.Propose(ctx, putK())
	var amb *spi.AmbiguousError
	if !errors.As(err, &amb) {
		t.Fatalf("write whose caller gave up: %v, want ambiguous", err)
	}
	if n := f.proposes.Load(); n != 1 {
		t.Fatalf("%d proposals, want 1", n)
	}
}

func putK() *command.Command {
	return &command.Command{Kind: command.KindTxn, Txn: &command.Txn{Then: []command.Op{
		{Type: command.OpPut, Key: "k", Value: []byte("v")},
	}}}
}

// Once a write may have reached the cell through one member, a second
// member's certain "not handed to the cell" (ErrNoQuorum) says nothing
// of the first copy: the client must not report the write as certainly
// not applied, but send it again (the proposer makes that safe).
func TestNoQuorumAfterASentCopyIsNotCertain(t *testing.T) {
	f := &fakeMember{propose: func(n int32, ctx context.Context, c *command.Command) (*command.Result, error) {
		switch n {
		case 1:
			return nil, errs.Ambiguous // the first copy may have applied
		case 2:
			return nil, errs.NoQuorum // this copy did not reach the cell
		}
		return &command.Result{Rev: 9}, nil
	}}
	c := serveFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Propose(ctx, putK())
	if errors.Is(err, errs.NoQuorum) {
		t.Fatalf("write sent once then refused by a member without quorum: %v, but its first copy may have applied", err)
	}
	if err != nil || res.Rev != 9 {
		t.Fatalf("revision %d, %v; want the write sent again and applied", res.Rev, err)
	}
}
