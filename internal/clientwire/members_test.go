package clientwire

import (
	"errors"
	"strings"
	"testing"
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
