// Package memlisten is an in-memory network of named listeners, for
// tests: a member serves clients on Listen(name), a client dials the
// name. No ports are used. A client's connections can be cut off as a
// network partition would (nothing arrives either way, nothing reports
// an error), so a client's own liveness checks are what notice.
package memlisten

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// ErrNoListener is returned by Dial when nobody listens on the name.
var ErrNoListener = errors.New("memlisten: no listener")

// Network holds the listeners and the connections dialled to them. Its
// methods are safe for concurrent use.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*Listener
	conns     map[string][]*conn // client ends, by the dialler's name
}

// New returns an empty network.
func New() *Network {
	return &Network{listeners: map[string]*Listener{}, conns: map[string][]*conn{}}
}

// Listen starts listening on name, replacing (and closing) any listener
// that had it.
func (n *Network) Listen(name string) *Listener {
	l := &Listener{n: n, name: name, in: make(chan net.Conn), done: make(chan struct{})}
	n.mu.Lock()
	old := n.listeners[name]
	n.listeners[name] = l
	n.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return l
}

// Dialer returns a dial function for a client named from: the address is
// a listener's name.
func (n *Network) Dialer(from string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		n.mu.Lock()
		l := n.listeners[addr]
		n.mu.Unlock()
		if l == nil {
			return nil, fmt.Errorf("%w on %q", ErrNoListener, addr)
		}
		a, b := net.Pipe()
		ca, cb := &conn{Conn: a, cut: make(chan struct{})}, &conn{Conn: b, cut: make(chan struct{})}
		ca.peer, cb.peer = cb, ca
		select {
		case l.in <- cb:
		case <-l.done:
			return nil, fmt.Errorf("%w on %q", ErrNoListener, addr)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		n.mu.Lock()
		n.conns[from] = append(n.conns[from], ca)
		n.mu.Unlock()
		return ca, nil
	}
}

// Cut cuts off every connection the client from has open now, both
// ways: writes are discarded, reads wait until the connection is closed.
// Later dials work.
func (n *Network) Cut(from string) {
	n.mu.Lock()
	cs := n.conns[from]
	delete(n.conns, from)
	n.mu.Unlock()
	for _, c := range cs {
		c.doCut()
		c.peer.doCut()
	}
}

// Listener is a net.Listener on the network.
type Listener struct {
	n    *Network
	name string
	in   chan net.Conn
	once sync.Once
	done chan struct{}
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.in:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops listening; connections already accepted stay open.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[l.name] == l {
			delete(l.n.listeners, l.name)
		}
		l.n.mu.Unlock()
	})
	return nil
}

// Addr returns the listener's name as an address.
func (l *Listener) Addr() net.Addr { return addr(l.name) }

type addr string

func (a addr) Network() string { return "mem" }
func (a addr) String() string  { return string(a) }

// conn is one end of a pipe that can be cut.
type conn struct {
	net.Conn
	peer    *conn
	cutOnce sync.Once
	cut     chan struct{}
}

func (c *conn) doCut() { c.cutOnce.Do(func() { close(c.cut) }) }

func (c *conn) isCut() bool {
	select {
	case <-c.cut:
		return true
	default:
		return false
	}
}

// Read reads, or once cut waits for Close (nothing arrives any more).
func (c *conn) Read(b []byte) (int, error) {
	if c.isCut() {
		return c.waitClosed()
	}
	n, err := c.Conn.Read(b)
	if err == nil || !c.isCut() {
		return n, err
	}
	return c.waitClosed()
}

// waitClosed blocks a cut connection's reader until the connection is
// closed (by this end, or the far end's own Close).
func (c *conn) waitClosed() (int, error) {
	buf := make([]byte, 1)
	for {
		// The underlying pipe is still delivering what the peer writes;
		// a cut peer discards it before it gets here, so this only
		// returns on close.
		if _, err := c.Conn.Read(buf); err != nil {
			return 0, err
		}
	}
}

// Write writes, or once cut discards (as a black-holed network would).
func (c *conn) Write(b []byte) (int, error) {
	if c.isCut() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}
