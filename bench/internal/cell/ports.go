package cell

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// FreeAddrs returns n loopback addresses ("127.0.0.1:port") whose ports
// were free a moment ago. The listeners are closed before returning, so
// another process could take a port in between; on a bench machine that
// does not happen in practice.
func FreeAddrs(n int) ([]string, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// OpenRetries is how many times a cell whose start found a port of
// FreeAddrs taken is started again, on fresh ports.
const OpenRetries = 3

// PortTaken reports whether err is a start that failed because a port
// FreeAddrs returned was taken in between (by another process, or by a
// cell of this one closing its connections).
func PortTaken(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}
