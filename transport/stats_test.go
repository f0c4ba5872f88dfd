package transport

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// peerStats returns name's entry in s, failing if there is none.
func peerStats(t *testing.T, s Stats, name string) PeerStats {
	t.Helper()
	for _, p := range s.Peers {
		if p.Peer == name {
			return p
		}
	}
	t.Fatalf("no stats for peer %q in %+v", name, s)
	return PeerStats{}
}

func TestTCPStatsCountFramesBytesDropsAndConnErrors(t *testing.T) {
	a := listen(t, TCPConfig{Name: "a"})
	b := listen(t, TCPConfig{Name: "b"})
	connect(map[string]*TCP{"a": a, "b": b})

	const k, size = 10, 100
	for range k {
		require.NoError(t, a.Send([]Envelope{{To: "b", Data: make([]byte, size)}}))
		select {
		case <-b.Receive():
		case <-time.After(waitFor):
			t.Fatal("nothing received")
		}
	}
	out, in := peerStats(t, a.Stats(), "b"), peerStats(t, b.Stats(), "a")
	require.Equal(t, uint64(k), out.FramesOut)
	require.Equal(t, uint64(k), in.FramesIn)
	require.Greater(t, out.BytesOut, uint64(k*size), "frames carry a header and the names too")
	require.Equal(t, out.BytesOut, in.BytesIn, "both ends count the same bytes")
	require.Zero(t, out.FramesIn)
	require.Zero(t, in.FramesOut)

	// An unknown destination is a drop, never a new label.
	dropped := a.Stats().Dropped
	require.NoError(t, a.Send([]Envelope{{To: "stranger", Data: []byte("x")}}))
	require.Equal(t, dropped+1, a.Stats().Dropped)
	require.Len(t, a.Stats().Peers, 1)

	// A peer whose address refuses connections: the dial fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	a.AddPeer("c", dead)
	require.NoError(t, a.Send([]Envelope{{To: "c", Data: []byte("x")}}))
	require.Eventually(t, func() bool { return a.Stats().ConnErrors > 0 }, waitFor, time.Millisecond)
	require.Len(t, a.Stats().Peers, 2)
	a.RemovePeer("c")
	require.Len(t, a.Stats().Peers, 1, "a removed peer's counters go with it")
}

func TestMemStatsCountFramesAndDrops(t *testing.T) {
	n := NewNetwork(1)
	defer n.Close()
	a, b := n.Join("a"), n.Join("b")
	require.NoError(t, a.Send([]Envelope{{To: "b", Data: []byte("hello")}}))
	<-b.Receive()
	out := peerStats(t, a.(StatsReporter).Stats(), "b")
	require.Equal(t, PeerStats{Peer: "b", FramesOut: 1, BytesOut: 5}, out)
	in := peerStats(t, b.(StatsReporter).Stats(), "a")
	require.Equal(t, PeerStats{Peer: "a", FramesIn: 1, BytesIn: 5}, in)

	n.Isolate("b")
	require.NoError(t, a.Send([]Envelope{{To: "b", Data: []byte("lost")}, {To: "nobody"}}))
	s := a.(StatsReporter).Stats()
	require.Equal(t, uint64(2), s.Dropped)
	require.Equal(t, uint64(1), peerStats(t, s, "b").FramesOut, "a dropped envelope is not sent")
	require.Len(t, s.Peers, 1)
}
