package coordcell

import (
	"encoding/binary"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coordcell/coord/bench/internal/cell"
	"github.com/coordcell/coord/internal/adminrpc"
	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/transport"
)

// Counting what coord sends needs no hook in the library: the bench sits
// on both links. Between members it wraps each member's transport
// (counted), which sees every envelope a member sends; between a
// client and its member it wraps the client's connection (countingConn),
// which sees the byte stream of clientwire's frames both ways. Both read
// only headers whose layout their packages fix and version.

// Member envelopes (raftnode/wire.go) start with a wire version, a kind,
// the cell ID and the sender's incarnation; application messages (kind
// 4) then carry adminrpc's channel byte, ChannelSessions for the batched
// keep-alives and their acks (keepalive.go).
const (
	raftHeaderLen = 2 + 8 + 8
	raftKindApp   = 4
)

// isSessionMsg reports whether data is a member's session keep-alive
// message (a batch or its ack).
func isSessionMsg(data []byte) bool {
	return len(data) > raftHeaderLen && data[1] == raftKindApp &&
		data[raftHeaderLen] == byte(adminrpc.ChannelSessions)
}

// memberIndex returns the index of the member called name, or -1.
func memberIndex(name string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(name, "coord-m"))
	if err != nil || i < 0 || i >= cell.Members || memberName(i) != name {
		return -1
	}
	return i
}

// Traffic returns every member's traffic so far: the TCP transport's
// counts with its peers, and the session messages it sent.
func (c *Cell) Traffic() [cell.Members]cell.MemberTraffic {
	var out [cell.Members]cell.MemberTraffic
	for m, cut := range c.trs {
		if cut == nil {
			continue
		}
		tr := cut.Transport.(*counted)
		if sr, ok := tr.Transport.(transport.StatsReporter); ok {
			for _, p := range sr.Stats().Peers {
				out[m].Peers.FramesOut += p.FramesOut
				out[m].Peers.FramesIn += p.FramesIn
				out[m].Peers.BytesOut += p.BytesOut
				out[m].Peers.BytesIn += p.BytesIn
			}
		}
		for to := range out[m].SessionMsgsTo {
			out[m].SessionMsgsTo[to] = tr.sessionTo[to].Load()
		}
	}
	return out
}

// counted wraps a member's TCP transport and counts the session
// messages it sends, by destination.
type counted struct {
	transport.Transport
	sessionTo [cell.Members]atomic.Uint64
}

// Send counts the session messages among envs and sends them all.
func (c *counted) Send(envs []transport.Envelope) error {
	for _, e := range envs {
		if isSessionMsg(e.Data) {
			if to := memberIndex(e.To); to >= 0 {
				c.sessionTo[to].Add(1)
			}
		}
	}
	return c.Transport.Send(envs)
}

// OnPeerDown passes the TCP transport's PeerWatcher through (see
// cuttable).
func (c *counted) OnPeerDown(f func(peer string)) {
	if w, ok := c.Transport.(transport.PeerWatcher); ok {
		w.OnPeerDown(f)
	}
}

// Connected passes the TCP transport's PeerWatcher through.
func (c *counted) Connected(peer string) bool {
	w, ok := c.Transport.(transport.PeerWatcher)
	return ok && w.Connected(peer)
}

// countingConn counts the clientwire frames written to and read from a
// client's connection.
type countingConn struct {
	net.Conn
	out, in *frameCounter
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.add(p[:n])
	return n, err
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.add(p[:n])
	return n, err
}

// frameCounter follows one direction of clientwire's stream of frames
// (a big-endian uint32 length, then the version, the kind, ...) across
// reads or writes that split them anywhere, and counts them by kind. A
// client reconnecting starts a new stream at a frame boundary, so one
// counter serves all of a client's connections.
type frameCounter struct {
	mu     sync.Mutex
	head   [lenAndVersionAndKind]byte
	have   int    // bytes of head seen of the current frame
	left   uint64 // bytes of the current frame still to come after head
	counts frameCounts
}

// lenAndVersionAndKind is how much of a frame says its kind.
const lenAndVersionAndKind = 4 + 1 + 1

// frameCounts are a frameCounter's totals.
type frameCounts struct {
	frames, bytes           uint64
	keepAlives, watchEvents uint64
	watchEventBytes         uint64 // of the watchEvents frames, length prefix included
}

func (f *frameCounter) add(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts.bytes += uint64(len(p))
	for len(p) > 0 {
		if f.left > 0 {
			n := min(uint64(len(p)), f.left)
			p, f.left = p[n:], f.left-n
			continue
		}
		n := copy(f.head[f.have:], p)
		p, f.have = p[n:], f.have+n
		if f.have < len(f.head) {
			continue
		}
		f.have = 0
		// The length counts the version and kind just read.
		length := uint64(binary.BigEndian.Uint32(f.head[:4]))
		f.left = max(length, 2) - 2
		f.counts.frames++
		switch clientwire.Kind(f.head[5]) {
		case clientwire.KindKeepAlive:
			f.counts.keepAlives++
		case clientwire.KindWatchEvents:
			f.counts.watchEvents++
			f.counts.watchEventBytes += 4 + length
		}
	}
}

func (f *frameCounter) read() frameCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}
