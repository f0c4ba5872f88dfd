// Package adminrpc carries what members say to each other outside the
// Raft log. Its Mux shares raftnode's application messages between their
// users (session keep-alives, admin requests) by a leading channel byte.
// Its RPC lets a follower ask the leader for a change only the leader can
// judge: promoting a learner needs the leader's view of how far the
// learner's log has come.
//
// Everything here is read from the network: a payload is refused, with a
// logged reason, if it is empty, too large, of an unknown version or
// channel, or does not decode; nothing panics and no claimed length is
// allocated before it is checked.
package adminrpc

import "log/slog"

// Channel names a user of raftnode's application messages. It is the
// first byte of each message.
type Channel byte

// The channels. Their values are on the wire: never reuse one.
const (
	// ChannelSessions carries the batched session keep-alives and their
	// acknowledgements (internal/sessions' wire format).
	ChannelSessions Channel = 'S'
	// ChannelAdmin carries this package's RPC.
	ChannelAdmin Channel = 'A'
)

// Frame returns data behind its channel byte, in a new slice: data may be
// a pooled buffer its caller reuses.
func Frame(ch Channel, data []byte) []byte {
	out := make([]byte, 0, 1+len(data))
	out = append(out, byte(ch))
	return append(out, data...)
}

// Handler receives the payload of one message on its channel. It runs on
// the raft loop, so it must not block; data is the handler's to keep.
type Handler func(from string, data []byte)

// Mux delivers application messages to the handler of their channel. Its
// handlers are fixed when it is made, so Deliver takes no lock.
type Mux struct {
	handlers map[Channel]Handler
	log      *slog.Logger
}

// NewMux returns a Mux delivering to handlers. A nil log discards.
func NewMux(log *slog.Logger, handlers map[Channel]Handler) *Mux {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Mux{handlers: make(map[Channel]Handler, len(handlers)), log: log}
	for ch, h := range handlers {
		m.handlers[ch] = h
	}
	return m
}

// Deliver hands one application message from member from to its
// channel's handler. A message on a channel this member does not know
// (sent by a newer build, say) is dropped and logged: a member reads only
// what it understands.
func (m *Mux) Deliver(from string, data []byte) {
	if len(data) == 0 {
		m.log.Warn("dropped an empty application message", "from", from)
		return
	}
	h, ok := m.handlers[Channel(data[0])]
	if !ok {
		m.log.Warn("dropped an application message on an unknown channel", "from", from, "channel", data[0])
		return
	}
	h(from, data[1:])
}
