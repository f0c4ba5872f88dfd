package sessions

import (
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/mpcheck"
	"github.com/vmihailenco/msgpack/v5"
)

// Time-to-live queries: a member asks the leader how long its table still
// gives a session (Session.TimeToLive). They share the keep-alives'
// channel but are a family of their own, told apart by the first byte
// (wireVersion for keep-alives, ttlWire for these), so keep-alive frames
// are unchanged. A member that predates them drops them as malformed;
// the asker's wait then ends with its context.

const ttlWire byte = 2

// IsTTL reports whether an encoded message is a time-to-live query or
// answer (DecodeTTL), rather than a keep-alive message (Decode).
func IsTTL(b []byte) bool { return len(b) > 0 && b[0] == ttlWire }

// TTLQuery asks the leader how long session ID has left. Seq matches the
// answer to the question.
type TTLQuery struct {
	Seq uint64 `msgpack:"s"`
	ID  int64  `msgpack:"i"`
}

// TTLStatus is what the leader's table says of a session.
type TTLStatus uint8

// The statuses. TTLRetry covers every answer the leader cannot give yet:
// not the leader any more, table not loaded, session not applied here
// yet, or its deadline passed and its expiry is under way.
const (
	TTLRetry TTLStatus = 0
	TTLAlive TTLStatus = 1 // Left is the time the table still gives it
	TTLGone  TTLStatus = 2 // the session has ended in the cell
)

// TTLAnswer is the leader's answer to a TTLQuery.
type TTLAnswer struct {
	Seq    uint64        `msgpack:"s"`
	Status TTLStatus     `msgpack:"t"`
	Left   time.Duration `msgpack:"l,omitempty"`
}

// TTLMessage is either a TTLQuery or a TTLAnswer.
type TTLMessage struct {
	Query  *TTLQuery  `msgpack:"q,omitempty"`
	Answer *TTLAnswer `msgpack:"a,omitempty"`
}

// EncodeTTL returns the encoding of m.
func EncodeTTL(m *TTLMessage) ([]byte, error) {
	b, err := msgpack.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte{ttlWire}, b...), nil
}

// DecodeTTL parses an encoded TTLMessage and validates it; it never
// panics on bad input.
func DecodeTTL(b []byte) (*TTLMessage, error) {
	if !IsTTL(b) {
		return nil, fmt.Errorf("%w: not a time-to-live message", ErrMalformed)
	}
	if err := mpcheck.Check(b[1:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var m TTLMessage
	if err := msgpack.Unmarshal(b[1:], &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case (m.Query == nil) == (m.Answer == nil):
		return nil, fmt.Errorf("%w: exactly one of query and answer", ErrMalformed)
	case m.Answer != nil && m.Answer.Status > TTLGone:
		return nil, fmt.Errorf("%w: status %d", ErrMalformed, m.Answer.Status)
	case m.Answer != nil && m.Answer.Left < 0:
		return nil, fmt.Errorf("%w: negative time left", ErrMalformed)
	}
	return &m, nil
}

// Deadline returns session id's deadline in this leader's table, as of
// now: TTLAlive with the deadline, TTLGone if the session has certainly
// ended (not in the table, and its ID, the index of its creation, is at
// or below the applied index: see classify), else TTLRetry. Deadlines
// are on the leader's monotonic clock, so only this process can turn one
// into a duration.
func (l *Leader) Deadline(id int64) (time.Time, TTLStatus) {
	applied := l.cfg.Cell.AppliedIndex() // first: see classify
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || !l.ready {
		return time.Time{}, TTLRetry
	}
	if d, ok := l.table.Deadline(id); ok {
		return d, TTLAlive
	}
	if id <= 0 || uint64(id) <= applied {
		return time.Time{}, TTLGone
	}
	return time.Time{}, TTLRetry
}
