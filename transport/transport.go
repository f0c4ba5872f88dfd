// Package transport moves opaque messages between the members of a cell.
//
// The cell only needs three things from a transport, so a user can bring
// their own: send without blocking, deliver what arrives on one channel,
// and close. Two implementations live here: an in-memory network with
// fault injection for tests (NewNetwork), and TCP with length-prefixed
// msgpack frames and optional mutual TLS (ListenTCP).
package transport

import (
	"errors"

	"github.com/coordcell/coord/internal/errs"
)

// Envelope is one message between two members, named by their stable
// member names. Data is opaque to the transport.
type Envelope struct {
	From string
	To   string
	Data []byte
}

// Transport delivers envelopes between the members of one cell. A
// Transport is bound to one member (its own name) when it is created.
//
// Implementations must be safe for concurrent use.
type Transport interface {
	// Send queues envelopes for delivery and returns at once: it never
	// blocks on the network or on a slow peer. Envelopes that cannot be
	// queued (the peer's queue is full, the peer is unknown or down) are
	// dropped; Raft retransmits. Per destination, envelopes that are
	// delivered arrive in the order they were sent, unless a test fault
	// says otherwise. Send does not keep envs or their Data once it
	// returns, so the caller may reuse its buffers. Send returns ErrClosed
	// after Close.
	Send(envs []Envelope) error
	// Receive returns the channel on which envelopes addressed to this
	// member arrive. It is closed after Close. The transport owns the
	// channel; Data slices handed out are the receiver's to keep.
	Receive() <-chan Envelope
	// Close stops sending and receiving and releases resources. It is
	// safe to call more than once.
	Close() error
}

// PeerAdder is an optional capability: transports that address peers
// (TCP) learn a new member's address through it. For TCP it also makes
// the name a known peer, whose frames are accepted.
type PeerAdder interface {
	AddPeer(name, addr string)
}

// PeerRemover is an optional capability: transports that authenticate
// peers (TCP) forget a removed member through it, cutting its
// connections and refusing its frames from then on, until it is added
// again.
type PeerRemover interface {
	RemovePeer(name string)
}

// StrangerGate is an optional capability: a transport that accepts
// frames only from known peers (TCP) lets through, as well, senders that
// f accepts, so that a member may hear from a member added while it was
// away before it learns of the addition. f gets the sender's name, which
// the transport authenticated as it does every peer's (under TLS, the
// client certificate names it); f runs on the transport's goroutines and
// must not block for long. What such a sender says is the receiver's to
// validate; the transport holds no address for it until AddPeer gives
// one. A later call replaces f; nil lets none through.
type StrangerGate interface {
	AdmitStrangers(f func(name string) bool)
}

// PeerWatcher is an optional capability: a transport that holds
// connections (TCP) tells when a peer's side closed one, as happens at
// once when the peer's process dies, and whether a connection with the
// peer is open. raftnode uses it to fail over without waiting out the
// election timeout when the leader's process dies; a transport without
// it fails over by the timeout alone.
type PeerWatcher interface {
	// OnPeerDown sets f, called with the peer's name when a connection to
	// or from the peer ends by the peer's doing (end of stream or reset),
	// never for one this transport closed itself, nor for one that just
	// went quiet (a partition, a dead host). f runs on the transport's
	// goroutines and must not block; a later call replaces it.
	OnPeerDown(f func(peer string))
	// Connected reports whether a connection with peer is open in either
	// direction: one it dialled us on, or one we dialled and it has not
	// closed. An open connection may be dead (a half-open link); a peer
	// that is alive and sends to us has one, but for the moment it takes
	// to redial.
	Connected(peer string) bool
}

// Freezer is an optional capability of test transports: the in-memory
// Network's Pause freezes the member behind an endpoint as SIGSTOP or a
// long GC pause would, and a member whose transport is a Freezer stands
// still while it says so (no ticks, sends or applies; timers frozen).
type Freezer interface {
	// Frozen reports whether the member must stand still now, and a
	// channel that is closed at the next change.
	Frozen() (frozen bool, changed <-chan struct{})
	// Settled tells the transport that the member now stands still (or
	// runs again) as Frozen said, so that whoever paused it can rely on
	// it from then on.
	Settled(frozen bool)
}

// Sentinel errors.
var (
	// ErrClosed is returned by Send after Close. It is coord.ErrClosed
	// itself: a member whose transport closed is closed.
	ErrClosed = errs.Closed
	// ErrFrameTooLarge is reported for a frame over the size limit.
	ErrFrameTooLarge = errors.New("transport: frame too large")
	// ErrMalformedFrame is reported for bytes that do not decode as a frame.
	ErrMalformedFrame = errors.New("transport: malformed frame")
	// ErrUnknownPeer is reported for a destination the transport has no
	// address for, and for a sender that is not a known peer.
	ErrUnknownPeer = errors.New("transport: unknown peer")
	// ErrPeerIdentity is reported when a peer is not who it claims to be:
	// its certificate does not name the member, or a connection bound to
	// one member carries a frame from another.
	ErrPeerIdentity = errors.New("transport: peer identity not proven")
	// ErrWeakSecret is returned by ListenTCP and SecretTLS for a secret
	// shorter than MinSecretLen.
	ErrWeakSecret = errors.New("transport: secret too short")
	// ErrConfig is returned by ListenTCP for a configuration it refuses,
	// such as Secret and TLS together, or TLS without client certificates.
	// It is coord.ErrInvalidConfig itself, so a caller of coord.Open
	// matches a transport's refusal with the same check as any other.
	ErrConfig = errs.InvalidConfig
	// ErrOverloaded is reported for a connection closed because it would
	// exceed a resource bound: the connection caps or the buffer budget.
	ErrOverloaded = errors.New("transport: over resource limit")
)
