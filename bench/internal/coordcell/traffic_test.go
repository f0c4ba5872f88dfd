package coordcell

import (
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordcell/coord/internal/adminrpc"
	"github.com/coordcell/coord/internal/clientwire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The counter finds every frame and its kind however the stream is cut
// into writes: whole, byte by byte, or at random.
func TestFrameCounterSplits(t *testing.T) {
	var stream []byte
	var err error
	msgs := []clientwire.Message{
		&clientwire.KeepAlive{Seq: 1, SessionIDs: []int64{1, 2, 3}},
		&clientwire.Ping{},
		&clientwire.WatchEvents{WatchID: 7, Rev: 9},
		&clientwire.KeepAlive{Seq: 2, SessionIDs: make([]int64, 300)},
		&clientwire.WatchEvents{WatchID: 7, Rev: 10},
	}
	var eventBytes uint64
	for i, m := range msgs {
		before := len(stream)
		if stream, err = clientwire.AppendFrame(stream, 1, uint64(i+1), m, clientwire.DefaultMaxFrame); err != nil {
			t.Fatal(err)
		}
		if m.Kind() == clientwire.KindWatchEvents {
			eventBytes += uint64(len(stream) - before)
		}
	}
	want := frameCounts{frames: 5, bytes: uint64(len(stream)), keepAlives: 2, watchEvents: 2, watchEventBytes: eventBytes}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	for name, size := range map[string]func() int{
		"whole":  func() int { return len(stream) },
		"bytes":  func() int { return 1 },
		"random": func() int { return 1 + rng.IntN(40) },
	} {
		var f frameCounter
		for rest := stream; len(rest) > 0; {
			n := min(size(), len(rest))
			f.add(rest[:n])
			rest = rest[n:]
		}
		if got := f.read(); got != want {
			t.Errorf("%s (seed %d): %+v, want %+v", name, seed, got, want)
		}
	}
}

// Only the members' session messages count as such.
func TestIsSessionMsg(t *testing.T) {
	header := make([]byte, raftHeaderLen)
	header[0], header[1] = 2, raftKindApp
	session := append(append([]byte(nil), header...), byte(adminrpc.ChannelSessions), 1)
	admin := append(append([]byte(nil), header...), byte(adminrpc.ChannelAdmin), 1)
	raft := append([]byte(nil), session...)
	raft[1] = 1
	for _, c := range []struct {
		data []byte
		want bool
	}{{session, true}, {admin, false}, {raft, false}, {header, false}, {nil, false}} {
		if got := isSessionMsg(c.data); got != c.want {
			t.Errorf("isSessionMsg(%v) = %v", c.data, got)
		}
	}
	if memberIndex("coord-m2") != 2 || memberIndex("coord-m3") != -1 || memberIndex("x") != -1 {
		t.Error("memberIndex")
	}
}
