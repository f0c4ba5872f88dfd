package clientwire

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func decodeMembers(payload []byte) (*MembersResult, error) {
	m := new(MembersResult)
	d := newDec(payload)
	m.decode(&d)
	return m, d.Done()
}

func TestMembersResultRoundTrip(t *testing.T) {
	in := &MembersResult{Addrs: []string{"10.0.0.1:7001", "[::1]:7002", "n2"}}
	out, err := decodeMembers(AppendMessage(nil, in))
	if err != nil || strings.Join(out.Addrs, ",") != strings.Join(in.Addrs, ",") {
		t.Fatalf("round trip: %q, %v", out.Addrs, err)
	}
	empty, err := decodeMembers(AppendMessage(nil, &MembersResult{}))
	if err != nil || len(empty.Addrs) != 0 {
		t.Fatalf("empty: %q, %v", empty.Addrs, err)
	}
}

// TestMembersResultHostile: a member's list is bounded in count and
// length and refused, not truncated, when it breaks a bound; a count
// that lies is refused before anything is allocated for it.
func TestMembersResultHostile(t *testing.T) {
	many := make([]string, MaxMemberAddrs+1)
	for i := range many {
		many[i] = "a:1"
	}
	bad := map[string][]byte{
		"too many":     AppendMessage(nil, &MembersResult{Addrs: many}),
		"too long":     AppendMessage(nil, &MembersResult{Addrs: []string{strings.Repeat("a", MaxMemberAddrLen+1)}}),
		"empty":        AppendMessage(nil, &MembersResult{Addrs: []string{""}}),
		"space":        AppendMessage(nil, &MembersResult{Addrs: []string{"a b:1"}}),
		"control":      AppendMessage(nil, &MembersResult{Addrs: []string{"a\n:1"}}),
		"not utf-8":    AppendMessage(nil, &MembersResult{Addrs: []string{"\xff:1"}}),
		"lying count":  appendUvarint(nil, 1<<40),
		"trailing":     append(AppendMessage(nil, &MembersResult{Addrs: []string{"a:1"}}), 0),
		"cut short":    AppendMessage(nil, &MembersResult{Addrs: []string{"abc:1"}})[:3],
		"count over 0": appendUvarint(nil, 3),
	}
	for name, payload := range bad {
		if _, err := decodeMembers(payload); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
	if err := CheckMemberAddr(strings.Repeat("a", MaxMemberAddrLen)); err != nil {
		t.Errorf("an address at the bound: %v", err)
	}
}

// membersFake is a member that serves Members.
type membersFake struct {
	*fakeHandler
	addrs []string
}

func (f *membersFake) Members(ctx context.Context, identity string) (*MembersResult, error) {
	return &MembersResult{Addrs: f.addrs}, nil
}

func TestMembersServed(t *testing.T) {
	h := &membersFake{fakeHandler: newFake(), addrs: []string{"10.0.0.1:7001", "10.0.0.2:7001"}}
	c, _ := dial(t, h, "alice", Limits{}, ClientOptions{})
	if v := c.Welcome().Version; v != MaxVersion || v < MembersVersion {
		t.Fatalf("agreed version %d, want %d", v, MaxVersion)
	}
	addrs, err := c.Members(context.Background())
	if err != nil || strings.Join(addrs, ",") != "10.0.0.1:7001,10.0.0.2:7001" {
		t.Fatalf("members: %q, %v", addrs, err)
	}
}

// A member whose Handler does not serve Members refuses the request and
// keeps the connection: the client carries on with what it was given.
func TestMembersNotServed(t *testing.T) {
	c, _ := dial(t, newFake(), "alice", Limits{}, ClientOptions{})
	_, err := c.Members(context.Background())
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeInvalidArgument {
		t.Fatalf("members of a member that does not serve them: %v", err)
	}
	if _, err := c.Read(context.Background(), &Read{Key: "k"}); err != nil {
		t.Fatalf("the connection after the refusal: %v", err)
	}
}

// A version 3 client and a version 2 member agree on 2, and the client
// never sends the member a Members it would take for a violation.
func TestMembersWithVersion2Member(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	done := make(chan error, 1)
	go func() {
		defer b.Close()
		f, err := newFrameReader(b).read(handshakeMaxFrame)
		if err != nil {
			done <- err
			return
		}
		m, err := DecodeMessage(f.Kind, f.Payload)
		if err != nil {
			done <- err
			return
		}
		if h := m.(*Hello); h.MaxVersion < MembersVersion {
			done <- errors.New("hello does not offer version 3")
			return
		}
		w, _ := AppendFrame(nil, handshakeVersion, 0, &Welcome{Version: 2, Member: "old",
			ElectionTimeout: time.Second, MinSessionTTL: 4 * time.Second,
			MaxFrame: DefaultMaxFrame, MaxInFlight: 4, MaxWatchers: 4}, handshakeMaxFrame)
		_, err = b.Write(w)
		done <- err
		// Anything the client sends now would be a version 2 member's
		// violation; there must be nothing.
		n, _ := io.Copy(io.Discard, b)
		if n != 0 {
			done <- errors.New("the client sent a frame to the version 2 member")
		}
		close(done)
	}()
	c, err := Handshake(context.Background(), a, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := c.Welcome().Version; v != 2 {
		t.Fatalf("agreed version %d, want 2", v)
	}
	if _, err := c.Members(context.Background()); !errors.Is(err, ErrVersion) {
		t.Fatalf("members of a version 2 member: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("the connection closed")
	default:
	}
	_ = c.Close()
	if err, ok := <-done; ok {
		t.Fatal(err)
	}
}

// A version 2 client is welcomed at 2 by a version 3 member, and a
// Members frame on that connection is a violation: neither side of a
// version 2 connection sees kinds 22 and 23.
func TestMembersRefusedBelowVersion3(t *testing.T) {
	h := &membersFake{fakeHandler: newFake(), addrs: []string{"a:1"}}
	conn, res := serve(t, h, "old", Limits{})
	fr := newFrameReader(conn)
	b, _ := AppendFrame(nil, 0, 0, &Hello{MinVersion: 1, MaxVersion: 2, MaxFrame: DefaultMaxFrame}, DefaultMaxFrame)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	f, err := fr.read(DefaultMaxFrame)
	if err != nil || f.Kind != KindWelcome {
		t.Fatalf("welcome: %+v, %v", f, err)
	}
	m, err := DecodeMessage(f.Kind, f.Payload)
	if err != nil || m.(*Welcome).Version != 2 {
		t.Fatalf("welcome %+v, %v; want version 2", m, err)
	}
	for _, k := range []Kind{KindMembers, KindMembersResult} {
		if err := checkFrame(Frame{Version: 2, Kind: k, ID: 1}, 2); !errors.Is(err, ErrProtocol) {
			t.Errorf("kind %d at version 2: %v, want ErrProtocol", k, err)
		}
		if err := checkFrame(Frame{Version: 3, Kind: k, ID: 0}, 3); !errors.Is(err, ErrProtocol) {
			t.Errorf("kind %d without a request ID: %v, want ErrProtocol", k, err)
		}
	}
	b, _ = AppendFrame(nil, 2, 1, &Members{}, DefaultMaxFrame)
	go conn.Write(b)
	if err := <-res; !errors.Is(err, ErrProtocol) {
		t.Fatalf("Serve ended with %v, want ErrProtocol", err)
	}
}
