package member

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serveHarness runs Serve on pipes, as a child's stdin and stdout.
type serveHarness struct {
	in   *io.PipeWriter
	out  *bufio.Scanner
	done chan error
	m    *fakeMember
}

func startServe(t *testing.T) *serveHarness {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &serveHarness{in: inW, out: bufio.NewScanner(outR), done: make(chan error, 1), m: &fakeMember{}}
	openers := map[string]cell.MemberOpener{"fake": func(_ context.Context, spec cell.MemberSpec) (cell.Member, error) {
		if spec.Index != 1 {
			return nil, errors.New("wrong spec")
		}
		return h.m, nil
	}}
	go func() {
		h.done <- Serve(context.Background(), inR, outW, openers, func(cell.Member) Service { return echoService{} })
		outW.Close()
		inR.Close()
	}()
	t.Cleanup(func() { inW.Close(); io.Copy(io.Discard, outR) })
	return h
}

func (h *serveHarness) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (h *serveHarness) recv(t *testing.T) Response {
	t.Helper()
	if !h.out.Scan() {
		t.Fatalf("no response: %v", h.out.Err())
	}
	var r Response
	if err := json.Unmarshal(h.out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// A child answers its spec once its member committed a write, then each
// request in order, a failed one with its error, and closes its member
// when its input ends.
func TestServe(t *testing.T) {
	h := startServe(t)
	h.send(t, `{"side":"fake","member":{"index":1,"peer_addrs":["a","b","c"],"dir":"x"}}`)
	if r := h.recv(t); r.Error != "" || r.Usage.CPUSeconds <= 0 || r.Usage.RSS <= 0 {
		t.Fatalf("ready: %+v", r)
	}
	if h.m.puts.Load() == 0 {
		t.Error("ready before a write committed")
	}
	h.send(t, `{"op":"echo","body":{"x":1}}`)
	if r := h.recv(t); r.Error != "" || string(r.Body) != `{"x":1}` {
		t.Errorf("echo: %+v", r)
	}
	h.send(t, `{"op":"fail"}`)
	if r := h.recv(t); r.Error != "failed" {
		t.Errorf("fail: %+v", r)
	}
	h.send(t, `not json`)
	if r := h.recv(t); r.Error == "" {
		t.Errorf("garbage answered without an error: %+v", r)
	}
	h.in.Close()
	if err := <-h.done; err != nil {
		t.Errorf("serve: %v", err)
	}
	if !h.m.closed.Load() {
		t.Error("member not closed")
	}
}

// A line past MaxLine ends the child with ErrTooLong instead of growing
// its buffer.
func TestServeTooLong(t *testing.T) {
	h := startServe(t)
	h.send(t, `{"side":"fake","member":{"index":1}}`)
	h.recv(t)
	go io.WriteString(h.in, `{"op":"echo","body":"`+strings.Repeat("x", MaxLine)+"\"}\n")
	select {
	case err := <-h.done:
		if !errors.Is(err, ErrTooLong) {
			t.Errorf("serve: %v, want ErrTooLong", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not end")
	}
	h.in.CloseWithError(io.ErrClosedPipe)
}

// An unknown side fails before any member opens.
func TestServeUnknownSide(t *testing.T) {
	h := startServe(t)
	h.send(t, `{"side":"zookeeper","member":{"index":1}}`)
	if err := <-h.done; err == nil || !strings.Contains(err.Error(), "zookeeper") {
		t.Errorf("serve: %v", err)
	}
}

type echoService struct{}

func (echoService) Handle(_ context.Context, op string, body json.RawMessage) (any, error) {
	if op == "echo" {
		return body, nil
	}
	return nil, errors.New("failed")
}

func (echoService) Close() error { return nil }
