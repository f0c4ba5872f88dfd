package memlisten

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func TestDialAcceptEcho(t *testing.T) {
	n := New()
	l := n.Listen("m")
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	c, err := n.Dialer("cl")(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

func TestDialNoListener(t *testing.T) {
	n := New()
	if _, err := n.Dialer("cl")(context.Background(), "nobody"); !errors.Is(err, ErrNoListener) {
		t.Fatalf("err = %v, want ErrNoListener", err)
	}
	l := n.Listen("m")
	l.Close()
	if _, err := n.Dialer("cl")(context.Background(), "m"); !errors.Is(err, ErrNoListener) {
		t.Fatalf("after close: err = %v, want ErrNoListener", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after close: %v", err)
	}
}

// A cut connection delivers nothing either way and reports no error
// until it is closed.
func TestCut(t *testing.T) {
	n := New()
	l := n.Listen("m")
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := n.Dialer("cl")(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	n.Cut("cl")
	if k, err := c.Write([]byte("lost")); err != nil || k != 4 {
		t.Fatalf("write after cut: %d, %v", k, err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 4))
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("server read returned %v on a cut connection", err)
	case <-time.After(50 * time.Millisecond): // absence of delivery: nothing to wait on
	}
	s.Close()
	if err := <-read; err == nil {
		t.Fatal("read after close succeeded")
	}
	c.Close()
	// Later dials work.
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	c2, err := n.Dialer("cl")(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
}
