package coord_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/coordcell/coord/internal/clientwire"
)

// TestClientLearnedAddrs: what a member says of the cell's addresses
// only adds to the configured members, is validated (host:port when the
// client dials TCP), deduplicated and capped, and an answer that leaves
// out earlier addresses does not make the client forget them.
func TestClientLearnedAddrs(t *testing.T) {
	t.Parallel()
	configured := []string{"10.0.0.1:7001"}
	answer := []string{
		"10.0.0.1:7001",                 // configured: never listed twice
		"10.0.0.2:7001",                 // new
		"10.0.0.2:7001",                 // repeated
		"no-port",                       // not host:port over TCP
		":7001",                         // no host
		"bad addr:1",                    // a space
		"\x00:1",                        // a control character
		strings.Repeat("h", 300) + ":1", // too long
	}
	got := coord.MergeLearned(configured, answer, []string{"10.0.0.3:7001", "10.0.0.2:7001"}, true)
	if want := []string{"10.0.0.2:7001", "10.0.0.3:7001"}; !slices.Equal(got, want) {
		t.Fatalf("learned %q, want %q", got, want)
	}
	// A custom dialler's addresses are its own: names pass, bounds stay.
	got = coord.MergeLearned([]string{"n0"}, []string{"n0", "n1", "n 2", ""}, nil, false)
	if want := []string{"n1"}; !slices.Equal(got, want) {
		t.Fatalf("learned %q, want %q", got, want)
	}
	// A member that floods the list is cut at the bound.
	var flood []string
	for i := range 3 * clientwire.MaxMemberAddrs {
		flood = append(flood, fmt.Sprintf("10.1.%d.%d:7001", i/256, i%256))
	}
	if got := coord.MergeLearned(configured, flood, flood, true); len(got) != clientwire.MaxMemberAddrs {
		t.Fatalf("%d learned addresses, want the bound %d", len(got), clientwire.MaxMemberAddrs)
	}
}

// TestClientFailoverToLearnedMember: a client configured with one member
// learns the others' client addresses from it (gossiped among the
// members), and moves to one of them when its only configured member
// crashes, its session and watch carrying on.
func TestClientFailoverToLearnedMember(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3, coordtest.WithGossip(), coordtest.WithClients())
	c.Leader()
	cl := connect(t, c, func(cfg *coord.ClientConfig) { cfg.Members = []string{c.Name(0)} })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The client asks at connect and every 20 pings; the members' gossip
	// may reach its member after the first ask.
	for want := []string{c.Name(1), c.Name(2)}; !slices.Equal(cl.Learned(), want); {
		select {
		case <-ctx.Done():
			t.Fatalf("learned %q, want %q (seed %d)", cl.Learned(), want, c.Seed())
		case <-time.After(20 * time.Millisecond):
		}
	}
	s, err := cl.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := cl.Watch(ctx, "learned/")
	<-w.Ready()

	c.Crash(0)
	kv, err := c.Node(1).Put(ctx, "learned/k", []byte("v"))
	for errors.Is(err, coord.ErrNoQuorum) || errors.Is(err, coord.ErrAmbiguous) {
		kv, err = c.Node(1).Put(ctx, "learned/k", []byte("v"))
	}
	if err != nil {
		t.Fatal(err)
	}
	if ev := collect(t, w, 1)[0]; ev.Rev != kv.ModRev {
		t.Fatalf("after the failover the watch saw %+v, want the put at %d", ev, kv.ModRev)
	}
	if m := cl.Member(); m != c.Name(1) && m != c.Name(2) {
		t.Fatalf("client on %q, want a learned member", m)
	}
	if _, err := cl.Put(ctx, "learned/by-client", []byte("v")); err != nil {
		t.Fatalf("Put after the failover: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended over the failover: %v", err)
	}
}

// TestClientServeAddrs: a member answers Members with the addresses it
// serves clients on, dialable ones only: a wildcard bind is left out.
func TestClientServeAddrs(t *testing.T) {
	t.Parallel()
	c := clientCell(t, 1)
	n := c.Leader()
	if got := coord.ClientServeAddrs(n); !slices.Equal(got, []string{c.Name(0)}) {
		t.Fatalf("in-memory listener: %q, want [%s]", got, c.Name(0))
	}
	for _, bind := range []string{"127.0.0.1:0", ":0"} {
		l, err := net.Listen("tcp", bind)
		if err != nil {
			t.Skipf("no TCP here: %v", err)
		}
		served := make(chan error, 1)
		go func() { served <- n.Admin().ServeClients(l) }()
		// A connection the member closes over a bad frame was accepted,
		// so ServeClients has registered l.
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte{0xff, 0xff, 0xff, 0xff})
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the member did not close over a bad frame: %v", err)
		}
		_ = conn.Close()
		got := coord.ClientServeAddrs(n)
		want := []string{c.Name(0)}
		if bind == "127.0.0.1:0" {
			want = append(want, l.Addr().String())
			slices.Sort(want)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("with %s bound: %q, want %q", bind, got, want)
		}
		_ = l.Close()
		<-served
	}
}

// TestClientRoundsRotate: each dial round starts after the member the
// client last connected to, learned addresses after the configured ones,
// and the member just left last; so a client that loses a member that
// still accepts connections (cut off from the cell) goes to another one.
func TestClientRoundsRotate(t *testing.T) {
	t.Parallel()
	got := coord.ClientRounds([]string{"a", "b", "c"}, []string{"x"}, 4)
	want := [][]string{
		{"a", "b", "c", "x"},
		{"b", "c", "x", "a"},
		{"c", "a", "x", "b"},
		{"a", "b", "x", "c"},
	}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("rounds %q, want %q", got, want)
	}
	// Connected to a learned address, the next round leaves it last and
	// starts where the configured order stood.
	got = coord.ClientRounds([]string{"x"}, []string{"y", "z"}, 3)
	want = [][]string{{"x", "y", "z"}, {"y", "z", "x"}, {"x", "z", "y"}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("rounds %q, want %q", got, want)
	}
}
