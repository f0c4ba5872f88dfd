package clientwire

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// A version 5 client and a version 4 member agree on 4; a ranged read
// fails with ErrVersion and sends nothing, rather than have its options
// ignored, and the connection stays.
func TestRangedReadWithVersion4Member(t *testing.T) {
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
		w, _ := AppendFrame(nil, handshakeVersion, 0, &Welcome{Version: 4, Member: "old",
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
	r := &Read{Key: "p/", Prefix: true, Ranged: true, Range: RangeOptions{Rev: 3}}
	if _, err := c.Read(context.Background(), r); !errors.Is(err, ErrVersion) {
		t.Fatalf("a ranged read of a version 4 member: %v, want ErrVersion", err)
	}
	select {
	case <-c.Done():
		t.Fatal("the connection closed")
	default:
	}
}

// Below version 5 the ranged kinds are violations; a ranged read with
// flags this build does not know is malformed.
func TestRangedReadRefused(t *testing.T) {
	for _, k := range []Kind{KindReadRange, KindRangeResult} {
		if err := checkFrame(Frame{Version: 4, Kind: k, ID: 1}, 4); !errors.Is(err, ErrProtocol) {
			t.Errorf("kind %d at version 4: %v, want ErrProtocol", k, err)
		}
		if err := checkFrame(Frame{Version: 5, Kind: k, ID: 1}, 5); err != nil {
			t.Errorf("kind %d at version 5: %v", k, err)
		}
	}
	b := (&Read{Key: "k", Ranged: true}).appendTo(nil)
	b[len(b)-6] = 0x80 // the flags byte: before the sort target and four one-byte varints
	if _, err := DecodeMessage(KindReadRange, b); !errors.Is(err, ErrProtocol) {
		t.Fatalf("unknown flags: %v, want ErrProtocol", err)
	}
}
