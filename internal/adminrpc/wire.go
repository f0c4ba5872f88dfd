package adminrpc

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/mpcheck"
	"github.com/vmihailenco/msgpack/v5"
)

// Version leads every admin payload. A member refuses a payload of
// another version rather than guess at it: members are upgraded one at a
// time, so a newer member's request may mean something this one would get
// wrong.
const Version byte = 1

// MaxMessageSize bounds an admin payload, version byte included. A
// request names one member and a reply carries a short message, so this
// is far more than either needs; anything larger is refused unread.
const MaxMessageSize = 16 << 10

// maxReplyMsg bounds the message a reply carries, so that a reply to any
// request that fitted fits too.
const maxReplyMsg = 1 << 10

// Sentinel errors of the wire format.
var (
	// ErrVersion: the payload's version is not Version.
	ErrVersion = errors.New("coord: unknown admin message version")
	// ErrMalformed: the payload is empty, too large, or does not decode
	// as exactly one request or reply.
	ErrMalformed = errors.New("coord: malformed admin message")
)

// The operations a Request may ask for.
const (
	// OpPromote asks the leader to make the learner Request.Name a voter.
	OpPromote = "promote"
	// OpMoveLeader asks the leader to hand leadership to the voter
	// Request.Name. A leader of an earlier build answers that it does not
	// support it.
	OpMoveLeader = "move-leader"
)

// Request is what a follower asks the leader.
type Request struct {
	// ID matches the reply to the request; unique among the asker's.
	ID   uint64 `msgpack:"i"`
	Op   string `msgpack:"o"`
	Name string `msgpack:"n"`
}

// Reply is the leader's answer to a Request.
type Reply struct {
	ID uint64 `msgpack:"i"`
	// Code is "" when the request was carried out; otherwise it names the
	// sentinel the asker returns (see codes), or "other".
	Code string `msgpack:"c"`
	Msg  string `msgpack:"m"`
}

// Message is one admin payload: exactly one of Req and Reply.
type Message struct {
	Req   *Request `msgpack:"q,omitempty"`
	Reply *Reply   `msgpack:"r,omitempty"`
}

// Encode returns the versioned encoding of m. It refuses a message that
// Decode would refuse, so a member never sends what its peers drop.
func Encode(m *Message) ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if m.Reply != nil && len(m.Reply.Msg) > maxReplyMsg {
		r := *m.Reply
		r.Msg = r.Msg[:maxReplyMsg]
		m = &Message{Reply: &r}
	}
	b, err := msgpack.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if 1+len(b) > MaxMessageSize {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, 1+len(b), MaxMessageSize)
	}
	return append([]byte{Version}, b...), nil
}

// Decode parses one admin payload. It never panics, and allocates no
// more than the payload's own size, whatever lengths the payload claims.
func Decode(b []byte) (*Message, error) {
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("%w: empty", ErrMalformed)
	case b[0] != Version:
		return nil, fmt.Errorf("%w: version %d (this member reads %d)", ErrVersion, b[0], Version)
	case len(b) > MaxMessageSize:
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(b), MaxMessageSize)
	}
	body := b[1:]
	if err := mpcheck.Check(body); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	r := bytes.NewReader(body)
	var m Message
	if err := msgpack.NewDecoder(r).Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the message", ErrMalformed, r.Len())
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	if m.Reply != nil && len(m.Reply.Msg) > maxReplyMsg {
		return nil, fmt.Errorf("%w: reply message of %d bytes, at most %d", ErrMalformed, len(m.Reply.Msg), maxReplyMsg)
	}
	return &m, nil
}

func (m *Message) check() error {
	if (m.Req == nil) == (m.Reply == nil) {
		return fmt.Errorf("%w: exactly one of request and reply", ErrMalformed)
	}
	return nil
}
