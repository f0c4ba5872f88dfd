package cell

import (
	"context"
	"time"
)

// Client is a process that uses the cell without being one of its
// members, connected over loopback to one member: coord's *coord.Client
// (Connect), etcd's gRPC clientv3. Every method is safe for concurrent
// use.
type Client interface {
	// Put writes value under key.
	Put(ctx context.Context, key string, value []byte) error
	// Get reads key, linearizable; a missing key is not an error.
	Get(ctx context.Context, key string) error
	// NewSession creates a session with the given TTL, kept alive by the
	// client.
	NewSession(ctx context.Context, ttl time.Duration) (Session, error)
	// Watch is Cell.Watch through the client.
	Watch(ctx context.Context, prefix string, fn func(key string)) error
	// Close ends the client (its sessions stop being kept alive).
	Close() error
}

// WatchHolder is implemented by clients that can hold a watch nobody
// reads (the scale scenario holds hundreds of thousands, with no change
// under them): no goroutine of the caller's per watch.
type WatchHolder interface {
	// HoldWatch starts a watch of prefix and returns once the member has
	// taken it on; it ends with ctx.
	HoldWatch(ctx context.Context, prefix string) error
}

// Connector is implemented by cells whose members serve clients.
type Connector interface {
	// Connect connects a client called name to member m alone.
	Connect(ctx context.Context, m int, name string) (Client, error)
}

// Link counts the frames and bytes one end of a link sent (Out) and
// received (In).
type Link struct {
	FramesOut, FramesIn uint64
	BytesOut, BytesIn   uint64
}

// Sub returns l minus an earlier reading of the same counters.
func (l Link) Sub(o Link) Link {
	return Link{FramesOut: l.FramesOut - o.FramesOut, FramesIn: l.FramesIn - o.FramesIn,
		BytesOut: l.BytesOut - o.BytesOut, BytesIn: l.BytesIn - o.BytesIn}
}

// MemberTraffic is what one member sent to and received from the other
// members since it started.
type MemberTraffic struct {
	// Peers is its traffic with the other members (the transport's
	// counts, all message kinds).
	Peers Link
	// SessionMsgsTo counts, by destination member, the session
	// keep-alive messages it sent: batched keep-alives from a follower to
	// the leader, and the leader's acks of them.
	SessionMsgsTo [Members]uint64
}

// TrafficCell is implemented by cells that count their members' traffic
// (coord).
type TrafficCell interface {
	Traffic() [Members]MemberTraffic
}

// ClientTraffic is what a client sent to and received from its member
// since it connected, over every connection it had.
type ClientTraffic struct {
	Link
	// KeepAlives counts the session keep-alive frames it sent, and
	// WatchEvents the frames of watch events it received (WatchEventBytes
	// their bytes).
	KeepAlives      uint64
	WatchEvents     uint64
	WatchEventBytes uint64
}

// Add returns t plus o.
func (t ClientTraffic) Add(o ClientTraffic) ClientTraffic {
	return ClientTraffic{Link: Link{FramesOut: t.FramesOut + o.FramesOut, FramesIn: t.FramesIn + o.FramesIn,
		BytesOut: t.BytesOut + o.BytesOut, BytesIn: t.BytesIn + o.BytesIn},
		KeepAlives: t.KeepAlives + o.KeepAlives, WatchEvents: t.WatchEvents + o.WatchEvents,
		WatchEventBytes: t.WatchEventBytes + o.WatchEventBytes}
}

// Sub returns t minus an earlier reading of the same counters.
func (t ClientTraffic) Sub(o ClientTraffic) ClientTraffic {
	return ClientTraffic{Link: t.Link.Sub(o.Link), KeepAlives: t.KeepAlives - o.KeepAlives,
		WatchEvents: t.WatchEvents - o.WatchEvents, WatchEventBytes: t.WatchEventBytes - o.WatchEventBytes}
}

// TrafficClient is implemented by clients that count their frames
// (coord's).
type TrafficClient interface {
	Traffic() ClientTraffic
}
