package clientwire

import (
	"context"
	"fmt"
	"unicode/utf8"
)

// Members and MembersResult (protocol version 3) let a client learn the
// client addresses of the cell's members from its member, so it can
// still reach the cell when every member it was configured with is gone.
// The list is hostile input to the client: bounded here in count and
// length, validated again by the client (it only ever adds addresses to
// try, never trusts one more than its configured members: a member at a
// learned address still has to pass the TLS handshake).
//
// Both kinds are refused on a connection below version 3 (checkFrame),
// so an older peer never sees them.
const (
	KindMembers       Kind = 22 // request → MembersResult (version 3)
	KindMembersResult Kind = 23 // response (version 3)

	// MembersVersion is the first protocol version with Members.
	MembersVersion uint8 = 3

	// MaxMemberAddrs bounds the addresses in a MembersResult.
	MaxMemberAddrs = 64
	// MaxMemberAddrLen bounds one address, in bytes.
	MaxMemberAddrLen = 256
)

// Members asks the member for the client addresses of the cell's
// members it knows (itself included).
type Members struct{}

// MembersResult lists client addresses, at most MaxMemberAddrs of at
// most MaxMemberAddrLen bytes each, printable UTF-8 without spaces.
type MembersResult struct {
	Addrs []string
}

// MembersHandler is the optional Handler method that answers Members; a
// Handler without it answers CodeInvalidArgument.
type MembersHandler interface {
	Members(ctx context.Context, identity string) (*MembersResult, error)
}

// Kind returns KindMembers.
func (*Members) Kind() Kind { return KindMembers }

// Kind returns KindMembersResult.
func (*MembersResult) Kind() Kind { return KindMembersResult }

func (*Members) appendTo(b []byte) []byte { return b }
func (*Members) decode(*dec)              {}

func (m *MembersResult) appendTo(b []byte) []byte {
	b = appendUvarint(b, uint64(len(m.Addrs)))
	for _, a := range m.Addrs {
		b = appendString(b, a)
	}
	return b
}

func (m *MembersResult) decode(d *dec) {
	n := d.Count(1)
	if n > MaxMemberAddrs {
		d.Fail("%d member addresses, at most %d", n, MaxMemberAddrs)
		return
	}
	if n == 0 {
		return
	}
	m.Addrs = make([]string, 0, n)
	for range n {
		a := d.Str()
		if err := CheckMemberAddr(a); err != nil {
			d.Fail("%v", err)
			return
		}
		m.Addrs = append(m.Addrs, a)
	}
}

// CheckMemberAddr checks one address of a MembersResult: non-empty, at
// most MaxMemberAddrLen bytes of printable UTF-8 with no spaces. What
// the address means (host:port, a test network's name) is the dialler's.
func CheckMemberAddr(a string) error {
	if a == "" || len(a) > MaxMemberAddrLen || !utf8.ValidString(a) {
		return fmt.Errorf("%w: member address of %d bytes (1 to %d of UTF-8)", ErrProtocol, len(a), MaxMemberAddrLen)
	}
	for _, r := range a {
		if r <= ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%w: member address %q has a space or control character", ErrProtocol, a)
		}
	}
	return nil
}

// Members asks the member for the cell's client addresses. It fails with
// ErrVersion, sending nothing, when the member speaks a version without
// Members.
func (c *ClientConn) Members(ctx context.Context) ([]string, error) {
	if v := c.welcome.Version; v < MembersVersion {
		return nil, fmt.Errorf("%w: member %q speaks version %d, members need %d", ErrVersion, c.welcome.Member, v, MembersVersion)
	}
	m, err := c.Call(ctx, &Members{})
	if err != nil {
		return nil, err
	}
	res, ok := m.(*MembersResult)
	if !ok {
		return nil, c.violation(m)
	}
	return res.Addrs, nil
}

// members answers a Members request through the Handler's optional
// MembersHandler; a Handler without one refuses it rather than dropping
// the connection, so the client can carry on without learned addresses.
func (s *session) members(id uint64) error {
	mh, ok := s.h.(MembersHandler)
	if !ok {
		if err := s.acquire(); err != nil {
			return err
		}
		s.reply(id, &ErrorMsg{Code: CodeInvalidArgument, Message: "members not served"})
		return nil
	}
	return s.request(id, func(ctx context.Context) (Message, error) {
		return mh.Members(ctx, s.id)
	})
}
