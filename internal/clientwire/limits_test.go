package clientwire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// bulkHandler answers a read of "big/<n>" with a value of n bytes and a
// watch of "big/<n>" with events of n-byte values, as fast as the sink
// takes them; it counts the reads served and the events pushed.
type bulkHandler struct {
	*fakeHandler
	reads  atomic.Int64
	pushed atomic.Int64
	ended  chan error // what each bulk watch ended with
}

func newBulk() *bulkHandler {
	return &bulkHandler{fakeHandler: newFake(), ended: make(chan error, 16)}
}

func bulkSize(key string) (int, bool) {
	var n int
	if _, err := fmt.Sscanf(key, "big/%d", &n); err != nil {
		return 0, false
	}
	return n, true
}

func (b *bulkHandler) Read(ctx context.Context, identity string, r *Read) (*ReadResult, error) {
	n, ok := bulkSize(r.Key)
	if !ok {
		return b.fakeHandler.Read(ctx, identity, r)
	}
	b.reads.Add(1)
	return &ReadResult{KVs: []command.KV{{Key: r.Key, Value: bytes.Repeat([]byte{'v'}, n)}}, Rev: 1}, nil
}

func (b *bulkHandler) Watch(ctx context.Context, identity string, w *WatchStart, sink *WatchSink) error {
	n, ok := bulkSize(w.Prefix)
	if !ok {
		return b.fakeHandler.Watch(ctx, identity, w, sink)
	}
	for rev := int64(1); ; rev++ {
		ev := Event{Type: EventPut, KV: command.KV{Key: w.Prefix, Value: bytes.Repeat([]byte{'e'}, n), ModRev: rev}, EndOfRev: true}
		if err := sink.Events(rev, []Event{ev}); err != nil {
			b.ended <- err
			return err
		}
		b.pushed.Add(1)
	}
}

// handshakeWith does the client's handshake by hand with the given frame
// limit, and returns the version agreed.
func handshakeWith(t *testing.T, conn net.Conn, fr *frameReader, maxFrame uint32) uint8 {
	t.Helper()
	b, _ := AppendFrame(nil, 0, 0, &Hello{MinVersion: 1, MaxVersion: MaxVersion, MaxFrame: maxFrame}, DefaultMaxFrame)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	f, err := fr.read(DefaultMaxFrame)
	if err != nil || f.Kind != KindWelcome {
		t.Fatalf("welcome: %+v, %v", f, err)
	}
	m, err := DecodeMessage(f.Kind, f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*Welcome).Version
}

// sendReads writes n reads of key (IDs from first) in one write, in the
// background: on a pipe the write waits for the member to read it all.
func sendReads(conn net.Conn, version uint8, first uint64, n int, key string) {
	var b []byte
	for i := range n {
		b, _ = AppendFrame(b, version, first+uint64(i), &Read{Key: key}, DefaultMaxFrame)
	}
	go func() { _, _ = conn.Write(b) }()
}

func waitServe(t *testing.T, res <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(within):
		t.Fatalf("Serve still running after %v", within)
		return nil
	}
}

// The member never sends a frame longer than its own limit, whatever
// the client's Hello claims (it used to take Hello.MaxFrame, up to 4 GiB,
// as its send limit): a reply past it is answered CodeFrameTooLarge.
func TestMemberSendsNoFrameOverItsOwnLimit(t *testing.T) {
	c, _ := dial(t, newBulk(), "alice", Limits{MaxFrame: MinMaxFrame}, ClientOptions{MaxFrame: 1 << 30})
	_, err := c.Read(context.Background(), &Read{Key: fmt.Sprintf("big/%d", 2*MinMaxFrame)})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a reply twice the member's frame limit: %v, want ErrFrameTooLarge", err)
	}
	if _, err := c.Read(context.Background(), &Read{Key: "big/100"}); err != nil {
		t.Fatalf("a short reply after it: %v", err)
	}
}

// A KeepAlive lists at most MaxKeepAliveIDs IDs: one-byte IDs used to be
// decoded into 8 bytes each, however many a frame held.
func TestKeepAliveIDsBounded(t *testing.T) {
	payload := func(n int) []byte {
		b := appendUvarint(appendUvarint(nil, 1), uint64(n))
		return append(b, bytes.Repeat([]byte{2}, n)...) // zig-zag 1
	}
	m, err := DecodeMessage(KindKeepAlive, payload(MaxKeepAliveIDs))
	if err != nil || len(m.(*KeepAlive).SessionIDs) != MaxKeepAliveIDs {
		t.Fatalf("%d IDs: %v", MaxKeepAliveIDs, err)
	}
	big := payload(8 * MaxKeepAliveIDs)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = DecodeMessage(KindKeepAlive, big)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("%d IDs: %v, want ErrProtocol", 8*MaxKeepAliveIDs, err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Fatalf("refusing %d one-byte IDs allocated %d bytes", 8*MaxKeepAliveIDs, n)
	}
	ka := mergeKeepAlives(&KeepAlive{Seq: 2, SessionIDs: make([]int64, MaxKeepAliveIDs)}, &KeepAlive{Seq: 1, SessionIDs: []int64{5}}, MaxKeepAliveIDs)
	if len(ka.SessionIDs) != MaxKeepAliveIDs {
		t.Fatalf("a merge past the bound lists %d IDs", len(ka.SessionIDs))
	}
}

// A watch's queue is bounded in bytes, not only in frames: a client that
// does not read ends its watch as slow once WatchQueueBytes wait.
func TestWatchQueueBoundedInBytes(t *testing.T) {
	h := newBulk()
	lim := Limits{MaxFrame: MinMaxFrame, WatchQueueBytes: 64 << 10, QueueBytes: 1 << 20}
	conn, _ := serve(t, h, "alice", lim)
	fr := newFrameReader(conn)
	v := handshakeWith(t, conn, fr, MinMaxFrame)
	b, _ := AppendFrame(nil, v, 1, &WatchStart{WatchID: 1, Prefix: "big/16384"}, DefaultMaxFrame)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing more (a pipe buffers nothing).
	select {
	case err := <-h.ended:
		if !errors.Is(err, ErrWatchEnded) {
			t.Fatalf("sink: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the watch still runs after %d events of 16 KiB", h.pushed.Load())
	}
	// 64 KiB of 16 KiB events, one more that found them queued, and one
	// the writer holds.
	if n := h.pushed.Load(); n > 6 {
		t.Fatalf("%d events of 16 KiB queued, limit 64 KiB", n)
	}
}

// A client that sends requests and reads nothing is cut off
// (ErrSlowReader): its write misses its deadline, and its queue never
// holds more than QueueBytes meanwhile.
func TestSlowReaderCutOff(t *testing.T) {
	h := newBulk()
	budget := NewBudget(0)
	lim := Limits{MaxFrame: MinMaxFrame, QueueBytes: 256 << 10, Budget: budget, IOTimeout: 200 * time.Millisecond}
	conn, res := serve(t, h, "slow", lim)
	fr := newFrameReader(conn)
	v := handshakeWith(t, conn, fr, MinMaxFrame)
	sendReads(conn, v, 1, 200, "big/16384")
	err := waitServe(t, res, 20*time.Second)
	if !errors.Is(err, ErrSlowReader) {
		t.Fatalf("Serve ended with %v, want ErrSlowReader", err)
	}
	if p := budget.Peak(); p > 256<<10 {
		t.Fatalf("%d bytes queued at the peak, limit %d", p, 256<<10)
	}
	if q := budget.Queued(); q != 0 {
		t.Fatalf("%d bytes still counted after the connection ended", q)
	}
	t.Logf("%d reads served, peak %d bytes queued", h.reads.Load(), budget.Peak())
}

// Replies are bounded in bytes, not in number: a client that never reads
// its replies stops being read once half its queue holds them, and the
// replies made meanwhile that do not fit cut it off. The reply slots
// (2 × MaxInFlight replies, whatever their size) used to let every one
// of them be made and queued.
func TestReplyBytesBounded(t *testing.T) {
	h := newBulk()
	budget := NewBudget(0)
	const limit = 256 << 10
	lim := Limits{MaxFrame: 128 << 10, MaxInFlight: 1000, QueueBytes: limit, Budget: budget}
	conn, res := serve(t, h, "slow", lim)
	v := handshakeWith(t, conn, newFrameReader(conn), 128<<10)
	sendReads(conn, v, 1, 100, "big/65536")
	var err error
	select {
	case err = <-res:
	case <-time.After(2 * time.Second):
	}
	t.Logf("%d replies of 64 KiB made, Serve: %v", h.reads.Load(), err)
	switch n := h.reads.Load(); {
	case errors.Is(err, ErrSlowReader):
	case err != nil:
		t.Fatalf("Serve ended with %v", err)
	case n > limit/(64<<10)+2:
		t.Fatalf("%d replies of 64 KiB made for a client that reads none, queue limit %d, and it was not cut off", n, limit)
	}
	if p := budget.Peak(); p > limit {
		t.Fatalf("%d bytes queued at the peak, limit %d", p, limit)
	}
}

// Connections that share a Budget are bounded together: when the total
// would pass it, the longest queue is cut (ErrSlowReader), and the total
// never passes the limit.
func TestBudgetCutsTheLongestQueue(t *testing.T) {
	h := newBulk()
	const total = 240 << 10
	budget := NewBudget(total)
	lim := Limits{MaxFrame: MinMaxFrame, MaxInFlight: 1000, QueueBytes: 256 << 10, Budget: budget}
	long, longRes := serve(t, h, "long", lim)
	v := handshakeWith(t, long, newFrameReader(long), MinMaxFrame)
	// Twelve replies of 12 KB, read by nobody: 144 KB queued, within the
	// connection's limit.
	sendReads(long, v, 1, 12, "big/12000")
	waitFor(t, func() bool { return h.reads.Load() == 12 && budget.Queued() >= 144_000 })

	// Another silent client asks for 120 KB more: once the total is
	// full, the longest queue goes, not the one that filled it last.
	short, shortRes := serve(t, h, "short", lim)
	v = handshakeWith(t, short, newFrameReader(short), MinMaxFrame)
	sendReads(short, v, 1, 30, "big/4096")

	err := waitServe(t, longRes, 20*time.Second)
	if !errors.Is(err, ErrSlowReader) {
		t.Fatalf("the longest queue's Serve ended with %v, want ErrSlowReader", err)
	}
	if p := budget.Peak(); p > total {
		t.Fatalf("%d bytes queued at the peak, budget %d", p, total)
	}
	waitFor(t, func() bool { return h.reads.Load() == 12+30 })
	select {
	case err := <-shortRes:
		t.Fatalf("the shorter queue's Serve ended too: %v", err)
	default:
	}
}

// A client that stops reading and then breaks the protocol (or
// half-closes) while replies wait for it: Serve returns at once (it used
// to wait for a write that the client would never let finish).
func TestServeReturnsWhileClientNeverReads(t *testing.T) {
	h := newBulk()
	conn, res := serve(t, h, "never", Limits{MaxFrame: MinMaxFrame})
	fr := newFrameReader(conn)
	v := handshakeWith(t, conn, fr, MinMaxFrame)
	var b []byte
	for i := range 20 {
		b, _ = AppendFrame(b, v, uint64(i+1), &Read{Key: "big/16384"}, DefaultMaxFrame)
	}
	bad, _ := AppendFrame(nil, v, 0, &Ping{}, DefaultMaxFrame) // a request without an ID
	go func() { _, _ = conn.Write(append(b, bad...)) }()
	if err := waitServe(t, res, 20*time.Second); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Serve ended with %v, want ErrProtocol", err)
	}
}

// Idle connections and frames left half-sent are closed (ErrIdle).
func TestServeIdleAndStalledFrames(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		conn, res := serve(t, newFake(), "idle", Limits{IdleTimeout: 200 * time.Millisecond})
		handshakeWith(t, conn, newFrameReader(conn), MinMaxFrame)
		if err := waitServe(t, res, 20*time.Second); !errors.Is(err, ErrIdle) {
			t.Fatalf("Serve ended with %v, want ErrIdle", err)
		}
	})
	t.Run("half a frame", func(t *testing.T) {
		conn, res := serve(t, newFake(), "stalled", Limits{IdleTimeout: time.Hour, IOTimeout: 200 * time.Millisecond})
		v := handshakeWith(t, conn, newFrameReader(conn), MinMaxFrame)
		b, _ := AppendFrame(nil, v, 1, &Read{Key: strings.Repeat("k", 100)}, DefaultMaxFrame)
		if _, err := conn.Write(b[:len(b)/2]); err != nil {
			t.Fatal(err)
		}
		err := waitServe(t, res, 20*time.Second)
		if !errors.Is(err, ErrIdle) || !strings.Contains(err.Error(), "unfinished") {
			t.Fatalf("Serve ended with %v, want ErrIdle for the unfinished frame", err)
		}
	})
}

// waitFor polls cond until it holds, for at most 20 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
