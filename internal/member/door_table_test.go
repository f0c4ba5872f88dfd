package member

import (
	"net"
	"testing"
	"time"
)

// fakeAddrConn is a connection that only has a remote address.
type fakeAddrConn struct {
	net.Conn
	remote string
}

func (c fakeAddrConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.ParseIP(c.remote), Port: 40000}
}

// The pending table always takes a new handshake: when its address's
// quarter is full it drops that address's oldest, when the total is full
// the oldest of all; one address never drops another's.
func TestPendingTableDropsTheOldest(t *testing.T) {
	var tb pendingTable
	now := time.Unix(1000, 0)
	add := func(addr string) (*pendingConn, *pendingConn) {
		now = now.Add(time.Millisecond)
		return tb.add(fakeAddrConn{remote: addr}, now, 4, 2)
	}
	a1, _ := add("10.0.0.1")
	a2, _ := add("10.0.0.1")
	b1, _ := add("10.0.0.2")
	if _, d := add("10.0.0.1"); d != a1 {
		t.Fatalf("a third from 10.0.0.1 dropped %+v, want its oldest", d)
	}
	if _, d := add("10.0.0.3"); d != nil {
		t.Fatalf("a fourth in all dropped %+v", d)
	}
	if _, d := add("10.0.0.4"); d != a2 {
		t.Fatalf("a fifth in all dropped %+v, want the oldest of all", d)
	}
	tb.remove(b1)
	tb.remove(b1) // twice is harmless
	if len(tb.all) != 3 || tb.byAddr["10.0.0.2"] != 0 || len(tb.byAddr) != 3 {
		t.Fatalf("after removing 10.0.0.2's: %d pending, by address %v", len(tb.all), tb.byAddr)
	}
}
