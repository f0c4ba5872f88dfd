package transport

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const waitFor = 5 * time.Second

func seqEnv(to string, i int) Envelope {
	return Envelope{To: to, Data: binary.BigEndian.AppendUint32(nil, uint32(i))}
}

func seqOf(t *testing.T, env Envelope) int {
	t.Helper()
	require.Len(t, env.Data, 4)
	return int(binary.BigEndian.Uint32(env.Data))
}

// recvN receives exactly n envelopes or fails the test.
func recvN(t *testing.T, ch <-chan Envelope, n int) []Envelope {
	t.Helper()
	out := make([]Envelope, 0, n)
	timeout := time.NewTimer(waitFor)
	defer timeout.Stop()
	for len(out) < n {
		select {
		case env, ok := <-ch:
			require.True(t, ok, "receive channel closed after %d of %d", len(out), n)
			out = append(out, env)
		case <-timeout.C:
			require.FailNow(t, "timed out", "received %d of %d", len(out), n)
		}
	}
	return out
}

// recvOne receives one envelope or fails the test.
func recvOne(t *testing.T, ch <-chan Envelope) Envelope {
	t.Helper()
	return recvN(t, ch, 1)[0]
}

// requireClosed drains ch and fails unless it gets closed.
func requireClosed(t *testing.T, ch <-chan Envelope) {
	t.Helper()
	timeout := time.After(waitFor)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			require.FailNow(t, "receive channel not closed")
		}
	}
}

func newNet(t *testing.T, seed int64, names ...string) (*Network, map[string]Transport) {
	t.Helper()
	n := NewNetwork(seed)
	t.Cleanup(n.Close)
	trs := make(map[string]Transport)
	for _, name := range names {
		trs[name] = n.Join(name)
	}
	return n, trs
}

// sendDropped sends one envelope and checks the network dropped it at
// once, which faults on connectivity do, synchronously.
func sendDropped(t *testing.T, n *Network, from Transport, to string) {
	t.Helper()
	before := n.Stats().Dropped
	require.NoError(t, from.Send([]Envelope{seqEnv(to, 999)}))
	require.Equal(t, before+1, n.Stats().Dropped, "envelope to %s not dropped", to)
}

// sendMarker sends a marker and checks it is the next thing to arrive:
// links are FIFO, so anything sent earlier and not dropped would come first.
func sendMarker(t *testing.T, from Transport, to Transport, toName string, marker int) {
	t.Helper()
	require.NoError(t, from.Send([]Envelope{seqEnv(toName, marker)}))
	require.Equal(t, marker, seqOf(t, recvOne(t, to.Receive())))
}

func TestMemFIFO(t *testing.T) {
	_, trs := newNet(t, 1, "a", "b")
	const n = 1000
	for i := range n {
		require.NoError(t, trs["a"].Send([]Envelope{seqEnv("b", i)}))
	}
	for i, env := range recvN(t, trs["b"].Receive(), n) {
		assert.Equal(t, "a", env.From)
		assert.Equal(t, "b", env.To)
		require.Equal(t, i, seqOf(t, env))
	}
}

func TestMemDelayKeepsFIFO(t *testing.T) {
	n, trs := newNet(t, 2, "a", "b")
	n.SetDelay(0, 2*time.Millisecond)
	const count = 300
	batch := make([]Envelope, 0, count)
	for i := range count {
		batch = append(batch, seqEnv("b", i))
	}
	require.NoError(t, trs["a"].Send(batch))
	for i, env := range recvN(t, trs["b"].Receive(), count) {
		require.Equal(t, i, seqOf(t, env))
	}
}

func TestMemSendCopiesData(t *testing.T) {
	n, trs := newNet(t, 3, "a", "b")
	n.SetDelay(time.Millisecond, time.Millisecond) // still queued when we scribble
	buf := []byte("hello")
	require.NoError(t, trs["a"].Send([]Envelope{{To: "b", Data: buf}}))
	copy(buf, "XXXXX")
	assert.Equal(t, "hello", string(recvOne(t, trs["b"].Receive()).Data))
}

func TestMemPartition(t *testing.T) {
	n, trs := newNet(t, 4, "a", "b", "c")
	a, b, c := trs["a"], trs["b"], trs["c"]
	n.Partition([]string{"a", "b"}, []string{"c"})
	sendMarker(t, a, b, "b", 1)
	sendMarker(t, b, a, "a", 2)
	sendDropped(t, n, a, "c")
	sendDropped(t, n, c, "a")
	sendDropped(t, n, c, "b")

	// Named in no group means cut off from everyone.
	n.Partition([]string{"a", "b"})
	sendDropped(t, n, c, "a")
	sendDropped(t, n, b, "c")

	n.Heal()
	sendMarker(t, a, c, "c", 3)
	sendMarker(t, c, b, "b", 4)
}

func TestMemIsolate(t *testing.T) {
	n, trs := newNet(t, 5, "a", "b", "c")
	n.Isolate("c")
	sendDropped(t, n, trs["a"], "c")
	sendDropped(t, n, trs["c"], "b")
	sendMarker(t, trs["a"], trs["b"], "b", 1)
	n.Heal()
	sendMarker(t, trs["c"], trs["a"], "a", 2)
	sendMarker(t, trs["b"], trs["c"], "c", 3)
}

func TestMemBlockIsOneWay(t *testing.T) {
	n, trs := newNet(t, 6, "a", "b")
	n.Block("a", "b")
	sendDropped(t, n, trs["a"], "b")
	sendMarker(t, trs["b"], trs["a"], "a", 1)
	n.Unblock("a", "b")
	sendMarker(t, trs["a"], trs["b"], "b", 2)

	n.Block("b", "a")
	sendDropped(t, n, trs["b"], "a")
	n.Heal()
	sendMarker(t, trs["b"], trs["a"], "a", 3)
}

func TestMemFaultsApplyInFlight(t *testing.T) {
	n, trs := newNet(t, 7, "a", "b")
	n.SetDelay(20*time.Millisecond, 20*time.Millisecond)
	require.NoError(t, trs["a"].Send([]Envelope{seqEnv("b", 1)}))
	n.Isolate("b")
	require.Eventually(t, func() bool { return n.Stats().Dropped == 1 }, waitFor, time.Millisecond)
	assert.Equal(t, uint64(0), n.Stats().Delivered)
}

func TestMemDropRateDeterministic(t *testing.T) {
	const count = 500
	run := func(seed int64) []int {
		n, trs := newNet(t, seed, "a", "b")
		n.SetDropRate(0.3)
		for i := range count {
			require.NoError(t, trs["a"].Send([]Envelope{seqEnv("b", i)}))
		}
		// Loss is decided at Send, so the count is known now.
		want := count - int(n.Stats().Dropped)
		var got []int
		for _, env := range recvN(t, trs["b"].Receive(), want) {
			got = append(got, seqOf(t, env))
		}
		require.True(t, slices.IsSorted(got))
		return got
	}
	first := run(42)
	assert.InDelta(t, count*0.7, len(first), count*0.1)
	assert.Equal(t, first, run(42), "same seed, same survivors")
	assert.NotEqual(t, first, run(43), "another seed, other survivors")
}

func TestMemDuplicates(t *testing.T) {
	n, trs := newNet(t, 8, "a", "b")
	n.SetDuplicateRate(1)
	const count = 100
	for i := range count {
		require.NoError(t, trs["a"].Send([]Envelope{seqEnv("b", i)}))
	}
	got := recvN(t, trs["b"].Receive(), 2*count)
	for i := range count {
		first, second := got[2*i], got[2*i+1]
		require.Equal(t, i, seqOf(t, first))
		require.Equal(t, i, seqOf(t, second))
		first.Data[0] ^= 0xff // each copy is its receiver's own
		require.Equal(t, i, seqOf(t, second))
	}
	st := n.Stats()
	assert.Equal(t, NetworkStats{Sent: count, Delivered: 2 * count, Duplicated: count}, st)
}

func TestMemReorder(t *testing.T) {
	n, trs := newNet(t, 9, "a", "b")
	n.SetDelay(time.Millisecond, 3*time.Millisecond)
	n.SetReorderRate(0.3)
	const count = 500
	batch := make([]Envelope, 0, count)
	for i := range count {
		batch = append(batch, seqEnv("b", i))
	}
	require.NoError(t, trs["a"].Send(batch))
	seqs := make([]int, 0, count)
	for _, env := range recvN(t, trs["b"].Receive(), count) {
		seqs = append(seqs, seqOf(t, env))
	}
	assert.False(t, slices.IsSorted(seqs), "nothing was reordered")
	slices.Sort(seqs)
	for i, s := range seqs {
		require.Equal(t, i, s, "lost or duplicated")
	}
}

func TestMemSendNeverBlocks(t *testing.T) {
	n, trs := newNet(t, 10, "a", "b")
	// b never reads: its inbox fills, then the link queue, then Send drops.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10 * (memRecvBuffer + memLinkQueue) {
			_ = trs["a"].Send([]Envelope{seqEnv("b", i)})
		}
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		require.FailNow(t, "Send blocked on a stuck receiver")
	}
	assert.Positive(t, n.Stats().Dropped)
}

func TestMemRejoin(t *testing.T) {
	n, trs := newNet(t, 11, "a", "b")
	a1, b := trs["a"], trs["b"]
	sendMarker(t, b, a1, "a", 1)

	// Joining while the old transport is open replaces it.
	a2 := n.Join("a")
	requireClosed(t, a1.Receive())
	require.ErrorIs(t, a1.Send([]Envelope{seqEnv("b", 0)}), ErrClosed)
	sendMarker(t, b, a2, "a", 2)

	// A crashed (closed) member is unreachable until it joins again.
	require.NoError(t, a2.Close())
	require.NoError(t, a2.Close(), "Close is idempotent")
	requireClosed(t, a2.Receive())
	sendDropped(t, n, b, "a")
	a3 := n.Join("a")
	sendMarker(t, b, a3, "a", 3)
	sendMarker(t, a3, b, "b", 4)
}

func TestMemInFlightToClosedIsDropped(t *testing.T) {
	n, trs := newNet(t, 12, "a", "b")
	n.SetDelay(20*time.Millisecond, 20*time.Millisecond)
	require.NoError(t, trs["b"].Send([]Envelope{seqEnv("a", 1)}))
	require.NoError(t, trs["a"].Close())
	require.Eventually(t, func() bool { return n.Stats().Dropped == 1 }, waitFor, time.Millisecond)
	assert.Equal(t, uint64(0), n.Stats().Delivered)

	// Nor does it reach the member's next incarnation: a restarted node
	// has lost what was in flight to the crashed one.
	n.Join("a")
	require.NoError(t, trs["b"].Send([]Envelope{seqEnv("a", 2)}))
	a3 := n.Join("a") // while 2 is in flight
	sendMarker(t, trs["b"], a3, "a", 3)
	assert.Equal(t, uint64(2), n.Stats().Dropped)
}

func TestMemNetworkClose(t *testing.T) {
	n, trs := newNet(t, 13, "a", "b")
	// Leave a delivery blocked on a full inbox, so Close has to cut it.
	for i := range 2 * memRecvBuffer {
		require.NoError(t, trs["a"].Send([]Envelope{seqEnv("b", i)}))
	}
	n.Close()
	n.Close()
	for _, tr := range trs {
		requireClosed(t, tr.Receive())
		require.ErrorIs(t, tr.Send(nil), ErrClosed)
	}
	late := n.Join("c")
	requireClosed(t, late.Receive())
	require.ErrorIs(t, late.Send([]Envelope{seqEnv("a", 1)}), ErrClosed)
}

func TestMemUnknownPeerDropped(t *testing.T) {
	n, trs := newNet(t, 14, "a")
	sendDropped(t, n, trs["a"], "nobody")
}

func TestMemConcurrentFaults(t *testing.T) {
	// For the race detector: faults flip while several members send.
	names := []string{"a", "b", "c"}
	n, trs := newNet(t, 15, names...)
	n.SetDelay(0, time.Millisecond)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 6 {
			case 0:
				n.Partition([]string{"a"}, []string{"b", "c"})
			case 1:
				n.SetDropRate(0.2)
			case 2:
				n.Isolate("b")
			case 3:
				n.SetReorderRate(0.2)
				n.SetDuplicateRate(0.1)
			case 4:
				n.Block("c", "a")
			case 5:
				n.Heal()
			}
		}
	}()
	for _, from := range names {
		for i := range 200 {
			for _, to := range names {
				_ = trs[from].Send([]Envelope{{To: to, Data: fmt.Appendf(nil, "%s%d", from, i)}})
			}
		}
	}
	close(stop)
	<-done
	st := n.Stats()
	assert.Equal(t, uint64(3*200*3), st.Sent)
}

func TestMemStampsRealSender(t *testing.T) {
	_, trs := newNet(t, 1, "a", "b")
	require.NoError(t, trs["a"].Send([]Envelope{{From: "c", To: "b", Data: []byte("x")}}))
	assert.Equal(t, "a", recvOne(t, trs["b"].Receive()).From, "a forged From must not survive Send")
}

func TestMemInject(t *testing.T) {
	n, trs := newNet(t, 1, "a", "b")
	data := []byte("forged")
	require.True(t, n.Inject(Envelope{From: "mallory", To: "b", Data: data}))
	copy(data, "XXXXXX")
	got := recvOne(t, trs["b"].Receive())
	assert.Equal(t, Envelope{From: "mallory", To: "b", Data: []byte("forged")}, got)
	assert.False(t, n.Inject(Envelope{From: "a", To: "nobody"}))
	require.NoError(t, trs["b"].Close())
	assert.False(t, n.Inject(Envelope{From: "a", To: "b"}))
	assert.Zero(t, n.Stats().Sent, "Inject bypasses the counters")
}
