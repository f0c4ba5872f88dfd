package sessions

import (
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/mpcheck"
	"github.com/vmihailenco/msgpack/v5"
)

// Keep-alive traffic between members: one KeepAlive per member per
// interval carries every local session; the leader answers with one Ack.

const wireVersion byte = 1

// ErrMalformed is returned for a message that does not decode.
var ErrMalformed = errors.New("coord: malformed session message")

// KeepAlive is one member's batched keep-alive to the leader.
type KeepAlive struct {
	Seq uint64  `msgpack:"s"`
	IDs []int64 `msgpack:"i"`
}

// Ack is the leader's answer to a KeepAlive: which sessions it holds alive
// (from the keep-alive's send time) and which it does not know (ended).
type Ack struct {
	Seq   uint64  `msgpack:"s"`
	Alive []int64 `msgpack:"a,omitempty"`
	Gone  []int64 `msgpack:"g,omitempty"`
}

// Message is either a KeepAlive or an Ack.
type Message struct {
	KeepAlive *KeepAlive `msgpack:"k,omitempty"`
	Ack       *Ack       `msgpack:"a,omitempty"`
}

// Encode returns the versioned encoding of m.
func Encode(m *Message) ([]byte, error) {
	b, err := msgpack.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte{wireVersion}, b...), nil
}

// Decode parses an encoded message; it never panics on bad input.
func Decode(b []byte) (*Message, error) {
	if len(b) == 0 || b[0] != wireVersion {
		return nil, fmt.Errorf("%w: version", ErrMalformed)
	}
	if err := mpcheck.Check(b[1:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var m Message
	if err := msgpack.Unmarshal(b[1:], &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if (m.KeepAlive == nil) == (m.Ack == nil) {
		return nil, fmt.Errorf("%w: exactly one of keep-alive and ack", ErrMalformed)
	}
	return &m, nil
}
