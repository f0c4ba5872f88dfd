package cell

import (
	"errors"
	"fmt"
	"net"
	"testing"
)

func TestPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	if !PortTaken(err) || !PortTaken(fmt.Errorf("member 2: %w", err)) {
		t.Errorf("a second listen on a port: %v, not taken", err)
	}
	// As a member process reports it: the text only.
	if !PortTaken(errors.New("member 1: coord member 1: transport: listen: listen tcp 127.0.0.1:1: bind: address already in use")) {
		t.Error("the text of a taken port, not taken")
	}
	if PortTaken(nil) || PortTaken(errors.New("no space left on device")) {
		t.Error("other errors taken for a taken port")
	}
}
