package attack

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tinyConfig is every attack at a size a -race test can take, against
// tinyMember's bounds: each attack meets the bound it is about.
func tinyConfig() Config {
	return Config{
		Conns: 12, ConnHold: 1500 * time.Millisecond, ProbeEvery: 200 * time.Millisecond,
		Watches: 4, WatchPuts: 6, WatchValue: 8 << 10,
		Reads: 8, ReadPrefixBytes: 64 << 10, FitPrefixBytes: 16 << 10,
		KeepAliveFrames: 2, KeepAliveBytes: 256 << 10,
		TxnKeys: 200, TxnValue: 100, TxnOps: 8, Txns: 2,
		Sessions: 30, SpreadSessions: 0, SessionTTL: 10 * time.Second, SessionWorkers: 4,
		CloseBytes: 128 << 10,
		Hold:       200 * time.Millisecond, Idle: 300 * time.Millisecond, Settle: 50 * time.Millisecond,
		ControlEvery: 50 * time.Millisecond,
	}
}

// tinyMember sets a member's door to bounds the tiny attacks pass: 8
// handshakes pending, reads of 48 KiB, 64 KiB queued per client, 10
// sessions per identity.
func tinyMember(c *coord.Config) {
	c.ClientMaxPending = 8
	c.MaxReadBytes = 48 << 10
	c.ClientQueueBytes = 64 << 10
	c.ClientMaxSessions = 10
}

// memCell opens 3 members over loopback TCP, in-memory storage, each
// serving clients under Policy.
func memCell(t *testing.T) []*coord.Node {
	t.Helper()
	var peers []coord.Peer
	for i := range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, coord.Peer{Name: fmt.Sprintf("m%d", i), Addr: l.Addr().String()})
		l.Close()
	}
	nodes := make([]*coord.Node, 3)
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	})
	for i, p := range peers {
		cfg := coord.Config{Name: p.Name, Addr: p.Addr, Peers: peers, ClientAddr: "127.0.0.1:0", ClientPolicy: Policy,
			TickInterval: 20 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2}
		tinyMember(&cfg)
		n, err := coord.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		_, err := nodes[0].Put(ctx, "warmup", []byte("x"))
		if err == nil {
			return nodes
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunAccounting runs every attack at tiny sizes against an
// in-memory cell and checks the accounting: every attack reported, each
// meeting its bound as the member's counters and the attacker's
// figures say, and the figures the bench prints named as documented.
func TestRunAccounting(t *testing.T) {
	nodes := memCell(t)
	s := StartSampler()
	defer s.Close()
	var targets []Target
	for _, n := range nodes {
		targets = append(targets, &Local{N: n, S: s})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, tinyConfig(), targets, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"conn-flood", "unread-watches", "prefix-reads", "prefix-reads-fit", "keepalive-frames",
		"read-txn", "read-txn-8", "sessions", "close-stuck"}
	if len(rep.Results) != len(want) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(want))
	}
	for i, res := range rep.Results {
		if res.Name != want[i] {
			t.Fatalf("result %d is %s, want %s", i, res.Name, want[i])
		}
		if res.Error != "" {
			t.Errorf("%s failed: %s", res.Name, res.Error)
		}
		if len(res.Base) != 3 || len(res.Peak) != 3 || len(res.Controls) != 2 {
			t.Fatalf("%s: %d bases, %d peaks, %d controls", res.Name, len(res.Base), len(res.Peak), len(res.Controls))
		}
		for _, c := range res.Controls {
			// The window's edges count as commits: a gap is within it.
			if c.GapSeconds <= 0 || c.GapSeconds > res.Seconds+1e-6 {
				t.Errorf("%s: control via %s gap %.3fs in a window of %.3fs", res.Name, c.Via, c.GapSeconds, res.Seconds)
			}
		}
		// In one process every Mark is the process's: the last one
		// (m2's) is the baseline the peaks are taken over.
		if b, p := res.Base[2], res.Peak[2]; p.RSS < b.RSS || p.Heap < b.Heap {
			t.Errorf("%s: peak RSS %d heap %d below the start's %d, %d", res.Name, p.RSS, p.Heap, b.RSS, b.Heap)
		}
		t.Log(res.Summary(rep.Victim))
	}
	fig := func(attack, name string) float64 {
		t.Helper()
		v, ok := rep.Find(attack).Figure(name)
		if !ok {
			t.Errorf("%s: no figure %s in %+v", attack, name, rep.Find(attack).Figures)
		}
		return v
	}
	flood := rep.Find("conn-flood")
	if d := flood.DoorDelta(rep.Victim); d.Refused == 0 {
		t.Errorf("conn-flood: the victim refused nothing: %+v", d)
	}
	// From another address an honest client always gets in; from the
	// flood's own, it shares the flood's bound.
	if fig("conn-flood", "dropped") == 0 || fig("conn-flood", "probe_other.ok") == 0 ||
		fig("conn-flood", "probe_other.ok") != fig("conn-flood", "probe_other.connects") {
		t.Errorf("conn-flood: %+v", flood.Figures)
	}
	if fig("unread-watches", "watches") != 4 {
		t.Errorf("unread-watches: %+v", rep.Find("unread-watches").Figures)
	}
	// A 64 KiB prefix is past the members' 48 KiB read bound: refused.
	if fig("prefix-reads", "sent") != 8 || fig("prefix-reads", "frames.error-read-too-large") == 0 {
		t.Errorf("prefix-reads: %+v", rep.Find("prefix-reads").Figures)
	}
	if fig("keepalive-frames", "closed") != 2 {
		t.Errorf("keepalive-frames: %+v", rep.Find("keepalive-frames").Figures)
	}
	if fig("read-txn", "txns.read-too-large") != 1 || fig("read-txn-8", "txns.read-too-large") != 2 {
		t.Errorf("read txns: %+v %+v", rep.Find("read-txn").Figures, rep.Find("read-txn-8").Figures)
	}
	if fig("sessions", "ttl_1000h.invalid-ttl") != 1 || fig("sessions", "create.ok") != 10 || fig("sessions", "create.too-many-sessions") != 20 {
		t.Errorf("sessions: %+v", rep.Find("sessions").Figures)
	}
	if c := fig("close-stuck", "close"); c <= 0 || c > 20_000 || !rep.Find("close-stuck").Peak[rep.Victim].Closed {
		t.Errorf("close-stuck: %+v", rep.Find("close-stuck").Figures)
	}
}

// TestLongestGap checks the gap accounting: the window's edges count as
// commits, times outside the window do not, order does not matter.
func TestLongestGap(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		ts      []time.Time
		gap     time.Duration
		commits int
	}{
		{nil, time.Second, 0},
		{[]time.Time{at(500)}, 500 * time.Millisecond, 1},
		{[]time.Time{at(900), at(100), at(300)}, 600 * time.Millisecond, 3},
		{[]time.Time{at(-50), at(100), at(1200)}, 900 * time.Millisecond, 1},
	} {
		gap, n := longestGap(tc.ts, at(0), at(1000))
		if gap != tc.gap || n != tc.commits {
			t.Errorf("%v: gap %v, %d commits; want %v, %d", tc.ts, gap, n, tc.gap, tc.commits)
		}
	}
}

// TestKeepAliveFrame checks the hand-built frame against the codec: the
// length it says, one-byte IDs, and a decoder that refuses it for its
// count past MaxKeepAliveIDs.
func TestKeepAliveFrame(t *testing.T) {
	for _, n := range []int{1 << 10, 200 << 10, 16 << 20} {
		b := keepAliveFrame(4, n)
		if len(b) != 4+n {
			t.Fatalf("frame of %d bytes for %d", len(b)-4, n)
		}
		if n >= 200<<10 {
			if _, _, err := readFrame(bytes.NewReader(b), len(b)); err == nil {
				t.Errorf("a frame of %d one-byte IDs decoded", n)
			}
			continue
		}
		m, _, err := readFrame(bytes.NewReader(b), len(b))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(fmt.Sprintf("%T", m), "KeepAlive") {
			t.Fatalf("decoded a %T", m)
		}
	}
}
