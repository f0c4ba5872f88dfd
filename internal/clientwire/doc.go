// Package clientwire is the protocol between a member and the processes
// that use the cell without being members (coord.Connect), and the
// connection machinery of both ends: ClientConn for the client, Serve for
// the member. It knows nothing of the root package; the root maps its
// sentinel errors to Codes and back, and implements Handler.
//
// # Frames
//
// Over any net.Conn (TLS or not: authentication is the caller's job; Serve
// is given the authenticated identity), each frame is
//
//	uint32 length (big endian) of what follows, at most the receiver's MaxFrame
//	uint8  version  the agreed protocol version; 0 for Hello, Welcome, Refuse
//	uint8  kind     see Kind
//	uint64 id       request ID (big endian): non-zero on requests, their
//	                responses and Cancel; zero on every other kind
//	payload         the message (varints, length-prefixed strings and bytes)
//
// The receiver checks the length before allocating (and allocates only as
// bytes arrive), then the version, the kind and the ID's presence; every
// count and length in a payload is checked against the bytes left, and a
// payload must be read exactly. Any failure is a violation: ErrProtocol,
// ErrFrameTooLarge or ErrVersion, and that connection alone is closed.
//
// # Handshake
//
// The client sends Hello{MinVersion, MaxVersion, Name, MaxFrame}; the
// member answers Welcome{Version (the highest both speak), Member,
// CellID, ElectionTimeout, MinSessionTTL, MaxFrame, MaxInFlight,
// MaxWatchers} or Refuse{Reason, Message} and closes (*RefusedError,
// ErrRefused; ErrVersion too when no version is shared). Handshake frames
// are at most 4 KiB and their layout is frozen, so builds of any versions
// agree. This build speaks versions MinVersion to MaxVersion.
//
// # Requests and streams
//
// Requests (client → member, ID chosen by the client, increasing) and
// their responses (same ID):
//
//	Ping → Pong
//	Propose{Command: internal/command encoding} → ProposeResult{command.Result}
//	Propose{a command nesting transactions, format 7} (version 6) → ProposeResult{Nested} (KindNestedResult)
//	Read{Key, Prefix, Serializable} → ReadResult{KVs, Rev}
//	Read{Key (a prefix), Serializable, After, Limit} (version 4: KindReadPage) → ReadResult
//	WatchStart{WatchID, Prefix, FromRev, ...} → OK, then the watch's stream
//	any of them → ErrorMsg{Code, Message} (a call returns *Error)
//
// One-way frames (ID zero unless said): WatchCancel{WatchID} and
// KeepAlive{Seq, SessionIDs} from the client, Cancel (ID = the request
// abandoned) from the client; WatchEvents, WatchProgress and WatchEnd
// (the last frame of a watch, with its Code and the revision to resume
// after) and KeepAliveAck{Seq, Confirmed, Gone} from the member. From
// version 7 the member reports a connection's quiet watches in one
// WatchesCurrent{Rev, WatchIDs} an election timeout rather than one
// WatchProgress each (current.go); the client hands each listed watch a
// WatchProgress, as from an older member.
//
// Propose is decoded and checked by Serve (CheckCommand: transactions,
// session create, a holder's session end; never member-only commands);
// the Handler checks that the sessions it names (SessionsNamed) belong to
// the client. Keep-alives are coalesced: at most one Handler call per
// connection runs, and the newest waiting replaces older ones.
//
// # Limits
//
// A member bounds each client (Limits): frame size, both ways (it sends
// nothing longer than its own limit, whatever the Hello says); requests
// in flight (beyond: an immediate ErrorMsg CodeTooManyRequests, the
// connection stays); replies queued unwritten, in number (twice the
// in-flight limit) and in bytes (half of QueueBytes): a client that sends
// without reading stops being read, so it slows itself, not the member;
// watches (CodeTooManyWatchers); frames and bytes of one watch queued
// unwritten (beyond: the watch ends with CodeSlowWatcher); one keep-alive
// ack queued at a time, and MaxKeepAliveIDs IDs in a keep-alive. Every
// frame queued counts against the connection's QueueBytes and a Budget
// shared by the member's clients: a frame that does not fit ends its
// watch, or cuts the connection (ErrSlowReader), as does a write past
// its deadline (IOTimeout); a client idle past IdleTimeout, or stalled
// mid-frame past IOTimeout, is closed (ErrIdle). The client waits for one of the member's
// in-flight places before sending a request, so a well-behaved client is
// never refused; a cancelled call gives its place back when the member's
// late answer arrives, which is dropped. A watch's frames are handed to
// its consumer on the reader goroutine, which never blocks on it: a
// consumer that cannot take one ends its watch (CodeSlowWatcher), never
// the connection. Every goroutine of either end ends with the
// connection: ClientConn.Close, or Serve's return.
package clientwire
