package clientwire

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// pageFake answers a read with what it asked for, to check that paging
// reaches the Handler.
type pageFake struct{ *fakeHandler }

func (pageFake) Read(_ context.Context, _ string, r *Read) (*ReadResult, error) {
	return &ReadResult{KVs: []command.KV{{Key: r.Key}, {Key: r.After}}, Rev: int64(r.Limit)}, nil
}

func TestPagedReadServed(t *testing.T) {
	c, _ := dial(t, pageFake{newFake()}, "alice", Limits{}, ClientOptions{})
	if v := c.Welcome().Version; v < PageVersion {
		t.Fatalf("agreed version %d, want at least %d", v, PageVersion)
	}
	res, err := c.Read(context.Background(), &Read{Key: "jobs/", Prefix: true, After: "jobs/7", Limit: 500})
	if err != nil || len(res.KVs) != 2 || res.KVs[0].Key != "jobs/" || res.KVs[1].Key != "jobs/7" || res.Rev != 500 {
		t.Fatalf("paged read: %+v, %v", res, err)
	}
	if _, err := c.Read(context.Background(), &Read{Key: "k", Limit: 2}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a paged read of one key: %v, want ErrProtocol", err)
	}
}

// A version 4 client and a version 3 member agree on 3; a paged read
// fails with ErrVersion and sends nothing (the member would take its kind
// for a violation), and plain reads still work.
func TestPagedReadWithVersion3Member(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	done := make(chan error, 1)
	go func() {
		defer b.Close()
		fr := newFrameReader(b)
		if _, err := fr.read(handshakeMaxFrame); err != nil {
			done <- err
			return
		}
		w, _ := AppendFrame(nil, handshakeVersion, 0, &Welcome{Version: 3, Member: "old",
			ElectionTimeout: time.Second, MinSessionTTL: 4 * time.Second,
			MaxFrame: DefaultMaxFrame, MaxInFlight: 4, MaxWatchers: 4}, handshakeMaxFrame)
		if _, err := b.Write(w); err != nil {
			done <- err
			return
		}
		close(done)
		_, _ = io.Copy(io.Discard, b)
	}()
	c, err := Handshake(context.Background(), a, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(context.Background(), &Read{Key: "p/", Prefix: true, Limit: 10}); !errors.Is(err, ErrVersion) {
		t.Fatalf("a paged read of a version 3 member: %v, want ErrVersion", err)
	}
	select {
	case <-c.Done():
		t.Fatal("the connection closed")
	default:
	}
}

// On a connection below version 4 a KindReadPage frame is a violation.
func TestPagedReadRefusedBelowVersion4(t *testing.T) {
	if err := checkFrame(Frame{Version: 3, Kind: KindReadPage, ID: 1}, 3); !errors.Is(err, ErrProtocol) {
		t.Errorf("KindReadPage at version 3: %v, want ErrProtocol", err)
	}
	if err := checkFrame(Frame{Version: 4, Kind: KindReadPage}, 4); !errors.Is(err, ErrProtocol) {
		t.Errorf("KindReadPage without a request ID: %v, want ErrProtocol", err)
	}
	conn, res := serve(t, pageFake{newFake()}, "old", Limits{})
	fr := newFrameReader(conn)
	b, _ := AppendFrame(nil, 0, 0, &Hello{MinVersion: 1, MaxVersion: 3, MaxFrame: DefaultMaxFrame}, DefaultMaxFrame)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	if f, err := fr.read(DefaultMaxFrame); err != nil || f.Kind != KindWelcome {
		t.Fatalf("welcome: %+v, %v", f, err)
	}
	b, _ = AppendFrame(nil, 3, 1, &Read{Key: "p/", Prefix: true, Limit: 1}, DefaultMaxFrame)
	go conn.Write(b)
	if err := <-res; !errors.Is(err, ErrProtocol) {
		t.Fatalf("Serve ended with %v, want ErrProtocol", err)
	}
}
