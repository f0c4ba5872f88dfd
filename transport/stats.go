package transport

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// StatsReporter is an optional capability: a transport that counts its
// traffic reports it through it, for metrics. TCP and the in-memory
// Network's transports do.
type StatsReporter interface {
	// Stats returns the transport's counters since it was created.
	Stats() Stats
}

// Stats counts a transport's traffic and troubles.
type Stats struct {
	// Peers has one entry per known peer, sorted by name: the set is
	// bounded by the cell's membership, since only known peers' frames
	// are accepted.
	Peers []PeerStats
	// ConnErrors counts failed dials, lost outbound connections and
	// inbound connections refused or closed for cause (TCP only).
	ConnErrors uint64
	// Dropped counts envelopes Send could not queue or queued and then
	// discarded without sending: a full queue, an unknown or unreachable
	// peer, a frame over the size limit, a queue emptied while its peer
	// could not be dialled.
	Dropped uint64
}

// PeerStats is the traffic with one peer. Bytes are those of the frames
// as written and read (TCP: length prefix included; in-memory: the
// envelope's data). A connection's opening hello is not counted.
type PeerStats struct {
	Peer      string
	FramesOut uint64
	BytesOut  uint64
	FramesIn  uint64
	BytesIn   uint64
}

// peerCounters counts one peer's traffic: atomics, so counting a frame
// takes no lock.
type peerCounters struct {
	framesOut, bytesOut, framesIn, bytesIn atomic.Uint64
}

func (c *peerCounters) out(n int) {
	c.framesOut.Add(1)
	c.bytesOut.Add(uint64(n))
}

func (c *peerCounters) in(n int) {
	c.framesIn.Add(1)
	c.bytesIn.Add(uint64(n))
}

func (c *peerCounters) stats(peer string) PeerStats {
	return PeerStats{Peer: peer, FramesOut: c.framesOut.Load(), BytesOut: c.bytesOut.Load(),
		FramesIn: c.framesIn.Load(), BytesIn: c.bytesIn.Load()}
}

func sortPeers(ps []PeerStats) {
	slices.SortFunc(ps, func(a, b PeerStats) int { return cmp.Compare(a.Peer, b.Peer) })
}

// Stats implements StatsReporter. Peers are the known ones (a removed
// peer's counters go with it).
func (t *TCP) Stats() Stats {
	t.mu.RLock()
	ps := make([]PeerStats, 0, len(t.peers))
	for name, p := range t.peers {
		ps = append(ps, p.traffic.stats(name))
	}
	t.mu.RUnlock()
	sortPeers(ps)
	return Stats{
		Peers:      ps,
		ConnErrors: t.connErrs.Load() + uint64(t.refused.Load()),
		Dropped:    t.dropped.Load(),
	}
}

// memTraffic is an in-memory transport's per-peer counters. Its peers
// are the members of a test network, so a map under a lock will do.
type memTraffic struct {
	mu      sync.Mutex
	peers   map[string]*peerCounters
	dropped atomic.Uint64
}

func (m *memTraffic) peer(name string) *peerCounters {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.peers[name]
	if c == nil {
		if m.peers == nil {
			m.peers = make(map[string]*peerCounters)
		}
		c = new(peerCounters)
		m.peers[name] = c
	}
	return c
}

// Stats implements StatsReporter. Dropped counts only what the network
// refused at Send (faults, a full link, an unknown or closed receiver),
// not envelopes lost later in flight.
func (t *memTransport) Stats() Stats {
	m := &t.traffic
	m.mu.Lock()
	ps := make([]PeerStats, 0, len(m.peers))
	for name, c := range m.peers {
		ps = append(ps, c.stats(name))
	}
	m.mu.Unlock()
	sortPeers(ps)
	return Stats{Peers: ps, Dropped: m.dropped.Load()}
}
