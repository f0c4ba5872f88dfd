package gossip

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrUnreachable is returned when dialing an address the in-memory
// network cannot reach (unknown, closed or partitioned away).
var ErrUnreachable = errors.New("gossip: address unreachable")

// MemNetwork carries memberlist's packets and streams between endpoints
// in one process, with partitions, so tests gossip without ports.
type MemNetwork struct {
	// bytes counts what the endpoints sent, packets and streams, to
	// measure gossip's cost.
	bytes atomic.Int64

	mu     sync.Mutex
	byAddr map[string]*memEndpoint
	next   int
	// group assigns members to partition groups; a member in no group
	// while groups exist is isolated. nil = everyone reaches everyone.
	group map[string]int
}

// NewMemNetwork returns an empty in-memory gossip network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{byAddr: map[string]*memEndpoint{}}
}

// Endpoint returns a memberlist Transport for member name, at a fresh
// address on this network, and that address ("ip:port").
func (n *MemNetwork) Endpoint(name string) (memberlist.Transport, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	ip := net.IPv4(10, byte(n.next>>16), byte(n.next>>8), byte(n.next))
	e := &memEndpoint{
		net: n, name: name, ip: ip, port: 7946,
		packets: make(chan *memberlist.Packet, 1024),
		streams: make(chan net.Conn, 16),
		done:    make(chan struct{}),
	}
	e.addr = net.JoinHostPort(ip.String(), "7946")
	n.byAddr[e.addr] = e
	return e, e.addr
}

// Partition splits members (by name) into groups that cannot reach each
// other; members in no group are isolated.
func (n *MemNetwork) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = map[string]int{}
	for g, names := range groups {
		for _, name := range names {
			n.group[name] = g + 1
		}
	}
}

// Bytes returns how many bytes the endpoints have sent so far, in
// packets and over streams.
func (n *MemNetwork) Bytes() int64 { return n.bytes.Load() }

// Heal removes every partition.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	n.group = nil
	n.mu.Unlock()
}

// route returns the endpoint at addr if from can reach it.
func (n *MemNetwork) route(from, addr string) (*memEndpoint, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	to, ok := n.byAddr[addr]
	if !ok {
		return nil, false
	}
	if n.group != nil {
		g := n.group[from]
		if g == 0 || g != n.group[to.name] {
			return nil, false
		}
	}
	return to, true
}

func (n *MemNetwork) remove(e *memEndpoint) {
	n.mu.Lock()
	if n.byAddr[e.addr] == e {
		delete(n.byAddr, e.addr)
	}
	n.mu.Unlock()
}

// memEndpoint is one member's memberlist.Transport on a MemNetwork.
type memEndpoint struct {
	net     *MemNetwork
	name    string
	ip      net.IP
	port    int
	addr    string
	packets chan *memberlist.Packet
	streams chan net.Conn
	// done is closed at Shutdown; the channels stay open (memberlist may
	// still be reading them), nothing is sent on them after it.
	done     chan struct{}
	doneOnce sync.Once
}

func (e *memEndpoint) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return e.ip, e.port, nil
}

func (e *memEndpoint) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	select {
	case <-e.done:
		return now, fmt.Errorf("gossip: endpoint %s is shut down", e.addr)
	default:
	}
	e.net.bytes.Add(int64(len(b)))
	to, ok := e.net.route(e.name, addr)
	if !ok {
		return now, nil // lost, as UDP would lose it
	}
	p := &memberlist.Packet{
		Buf:       append([]byte(nil), b...),
		From:      &net.UDPAddr{IP: e.ip, Port: e.port},
		Timestamp: time.Now(),
	}
	select {
	case <-to.done:
	case to.packets <- p:
	default: // the receiver's buffer is full: dropped
	}
	return now, nil
}

func (e *memEndpoint) PacketCh() <-chan *memberlist.Packet { return e.packets }

func (e *memEndpoint) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	to, ok := e.net.route(e.name, addr)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnreachable, addr)
	}
	p0, p1 := net.Pipe()
	var mine, theirs net.Conn = countingConn{p0, &e.net.bytes}, countingConn{p1, &e.net.bytes}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case to.streams <- theirs:
		return mine, nil
	case <-to.done:
	case <-e.done:
	case <-t.C:
	}
	mine.Close()
	theirs.Close()
	return nil, fmt.Errorf("%w: %s", ErrUnreachable, addr)
}

func (e *memEndpoint) StreamCh() <-chan net.Conn { return e.streams }

// countingConn counts what one side of a stream writes.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (e *memEndpoint) Shutdown() error {
	e.doneOnce.Do(func() {
		close(e.done)
		e.net.remove(e)
		// Streams handed over but never taken would leak their pipes.
		for {
			select {
			case c := <-e.streams:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}
