package clientwire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// sampleMessages holds one filled-in value of every kind (and some
// empty ones), for round trips and as the fuzz corpus.
func sampleMessages() []Message {
	kv := command.KV{Key: "locks/a/1", Value: []byte("v"), Version: 3, CreateRev: 7, ModRev: 9, Session: 42}
	del := command.KV{Key: "k", Version: 2, CreateRev: -1, ModRev: 1 << 40}
	return []Message{
		&Hello{MinVersion: 1, MaxVersion: 3, Name: "worker-7", MaxFrame: DefaultMaxFrame},
		&Welcome{Version: 1, Member: "m1", CellID: 1<<63 + 5, ElectionTimeout: time.Second,
			MinSessionTTL: 4 * time.Second, MaxFrame: 1 << 20, MaxInFlight: 64, MaxWatchers: 128},
		&Refuse{Reason: RefuseBusy, Message: "too many clients"},
		&Ping{}, &Pong{}, &OK{}, &Cancel{},
		&Propose{Command: []byte{3, 1, 2, 3}},
		&Propose{Command: []byte{}},
		&ProposeResult{Result: command.Result{Status: command.StatusOK, Rev: 12, Succeeded: true, SessionID: 4,
			Ops: []command.OpResult{{KVs: []command.KV{kv, del}}, {Deleted: 3}}}},
		&ProposeResult{},
		&ProposeResult{Nested: true, Result: command.Result{Rev: 12, Succeeded: true, Ops: []command.OpResult{
			{KVs: []command.KV{kv}},
			{Txn: &command.TxnResult{Succeeded: false, Ops: []command.OpResult{
				{Deleted: 2}, {Txn: &command.TxnResult{Succeeded: true}}}}},
		}}},
		&Read{Key: "config/", Prefix: true, Serializable: true},
		&Read{Key: "jobs/", Prefix: true, Serializable: true, After: "jobs/0042", Limit: 500},
		&Read{Key: "", Prefix: true, After: "a"},
		&ReadResult{KVs: []command.KV{kv}, Rev: 99},
		&ReadResult{},
		&Read{Key: "a", Ranged: true, Serializable: true, After: "b", Limit: 3, Range: RangeOptions{End: "c",
			Rev: 7, KeysOnly: true, Count: true, SortTarget: 3, SortDescend: true, MinModRev: 1, MaxModRev: 2,
			MinCreateRev: 3, MaxCreateRev: 4}},
		&Read{Key: "p/", Prefix: true, Ranged: true, Range: RangeOptions{CountOnly: true}},
		&ReadResult{Ranged: true, KVs: []command.KV{kv}, Rev: 99, Count: 12},
		&ReadResult{Ranged: true, Rev: 99, CompactRev: 40},
		&WatchStart{WatchID: 9, Prefix: "p/", FromRev: 5, PrevKV: true, PutsOnly: true,
			ProgressInterval: time.Minute, MaxLag: 1000},
		&WatchEvents{WatchID: 9, Rev: 10, Events: []Event{
			{Type: EventPut, KV: kv, PrevKV: &del},
			{Type: EventDelete, KV: del, EndOfRev: true},
		}},
		&WatchProgress{WatchID: 9, Rev: 11},
		&WatchesCurrent{Rev: 12, WatchIDs: []uint64{1, 9, 10, 1 << 40}},
		&WatchesCurrent{Rev: 0},
		&WatchEnd{WatchID: 9, Code: CodeCompacted, Message: "compacted", CompactRev: 4, Rev: 3},
		&WatchCancel{WatchID: 9},
		&KeepAlive{Seq: 17, SessionIDs: []int64{1, 2, -3, 1 << 62}},
		&KeepAliveAck{Seq: 17, Confirmed: []int64{1, 2}, Gone: []Gone{{ID: -3, Code: CodeForbidden}, {ID: 1 << 62, Code: CodeSessionExpired}}},
		&ErrorMsg{Code: CodeConflict, Message: "compare failed"},
		&TimeToLive{SessionID: 1 << 40},
		&TimeToLiveResult{Left: 2500 * time.Millisecond, TTL: 10 * time.Second},
		&Members{},
		&MembersResult{Addrs: []string{"10.0.0.1:7001", "[::1]:7002"}},
	}
}

func TestRoundTripEveryMessage(t *testing.T) {
	seen := map[Kind]bool{}
	for _, m := range sampleMessages() {
		seen[m.Kind()] = true
		b, err := AppendFrame(nil, 1, 5, m, DefaultMaxFrame)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		f, err := ParseFrame(b, DefaultMaxFrame)
		if err != nil {
			t.Fatalf("%T: parse: %v", m, err)
		}
		if f.Kind != m.Kind() || f.ID != 5 || f.Version != 1 {
			t.Fatalf("%T: header %+v", m, f)
		}
		got, err := DecodeMessage(f.Kind, f.Payload)
		if err != nil {
			t.Fatalf("%T: decode: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%T: round trip\n got %+v\nwant %+v", m, got, m)
		}
	}
	for k := Kind(1); k <= maxKind; k++ {
		if !seen[k] {
			t.Errorf("kind %d has no sample", k)
		}
	}
}

func TestDecodeSharesNoMemory(t *testing.T) {
	m := &ReadResult{KVs: []command.KV{{Key: "k", Value: []byte("value")}}}
	payload := AppendMessage(nil, m)
	got, err := DecodeMessage(KindReadResult, payload)
	if err != nil {
		t.Fatal(err)
	}
	for i := range payload {
		payload[i] = 0xff
	}
	if string(got.(*ReadResult).KVs[0].Value) != "value" {
		t.Fatal("decoded value changed with the payload")
	}
}

func TestDecodeRefusesBadPayloads(t *testing.T) {
	for _, m := range sampleMessages() {
		full := AppendMessage(nil, m)
		// Every strict prefix fails (or, for a kind with an empty body,
		// there is none), and so does one trailing byte.
		for n := range len(full) {
			if r, ok := m.(*TimeToLiveResult); ok && n == len(AppendMessage(nil, &TimeToLiveResult{Left: r.Left})) {
				continue // the first layout, without the granted TTL (TestTimeToLiveResultLayouts)
			}
			if _, err := DecodeMessage(m.Kind(), full[:n]); !errors.Is(err, ErrProtocol) {
				t.Fatalf("%T cut to %d of %d bytes: err %v", m, n, len(full), err)
			}
		}
		if _, err := DecodeMessage(m.Kind(), append(full, 0)); !errors.Is(err, ErrProtocol) {
			t.Fatalf("%T with a trailing byte: err %v", m, err)
		}
	}
	if _, err := DecodeMessage(0, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("kind 0: %v", err)
	}
	if _, err := DecodeMessage(maxKind+1, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("unknown kind: %v", err)
	}
}

// TestTimeToLiveResultLayouts: a result without the granted TTL (the
// first layout of version 2) decodes with TTL 0, one with it round-trips,
// and a granted TTL that is not positive is refused.
func TestTimeToLiveResultLayouts(t *testing.T) {
	old := appendVarint(nil, int64(3*time.Second))
	m, err := DecodeMessage(KindTimeToLiveResult, old)
	if err != nil {
		t.Fatal(err)
	}
	if r := m.(*TimeToLiveResult); r.Left != 3*time.Second || r.TTL != 0 {
		t.Fatalf("first layout: %+v", r)
	}
	if got := AppendMessage(nil, &TimeToLiveResult{Left: 3 * time.Second}); !bytes.Equal(got, old) {
		t.Fatalf("a result without TTL is written in the first layout: %x, want %x", got, old)
	}
	m, err = DecodeMessage(KindTimeToLiveResult, appendVarint(old, int64(7*time.Second)))
	if err != nil || m.(*TimeToLiveResult).TTL != 7*time.Second {
		t.Fatalf("with TTL: %+v, %v", m, err)
	}
	for _, ttl := range []int64{0, -1, math.MinInt64} {
		if _, err := DecodeMessage(KindTimeToLiveResult, appendVarint(old, ttl)); !errors.Is(err, ErrProtocol) {
			t.Fatalf("granted TTL %d: err %v", ttl, err)
		}
	}
	neg := appendVarint(appendVarint(nil, -1), int64(time.Second))
	if _, err := DecodeMessage(KindTimeToLiveResult, neg); !errors.Is(err, ErrProtocol) {
		t.Fatalf("negative time left: err %v", err)
	}
}

func TestDecodeHugeCountsAllocateNothing(t *testing.T) {
	// A KeepAlive claiming 2^62 session IDs in a few bytes, a ReadResult
	// claiming a 2^40-byte key, a value of 2^50 bytes.
	huge := [][2]any{
		{KindKeepAlive, appendUvarint(appendUvarint(nil, 1), 1<<62)},
		{KindReadResult, appendUvarint(nil, 1<<40)},
		{KindPropose, appendUvarint(nil, 1<<50)},
		{KindWatchEvents, appendUvarint(appendUvarint(nil, 1), 1<<30)},
	}
	for _, h := range huge {
		k, p := h[0].(Kind), h[1].([]byte)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 10 {
			if _, err := DecodeMessage(k, p); !errors.Is(err, ErrProtocol) {
				t.Fatalf("kind %d: %v", k, err)
			}
		}
		runtime.ReadMemStats(&after)
		// The message structs and the errors: nothing sized by the claim.
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("kind %d: %d bytes allocated for ten lying counts", k, n)
		}
	}
}

func TestParseFrameRefusesHostileHeaders(t *testing.T) {
	good, _ := AppendFrame(nil, 1, 1, &Read{Key: "k"}, DefaultMaxFrame)
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrProtocol},
		{"short length", good[:2], ErrProtocol},
		{"truncated body", good[:len(good)-1], ErrProtocol},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 1, 1}, ErrFrameTooLarge},
		{"shorter than header", []byte{0, 0, 0, 3, 1, 1, 0}, ErrProtocol},
	}
	for _, c := range cases {
		if _, err := ParseFrame(c.b, DefaultMaxFrame); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := ParseFrame(good, 8); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("over a small limit: %v", err)
	}
}

func TestCheckFrame(t *testing.T) {
	cases := []struct {
		f    Frame
		want error
	}{
		{Frame{Version: 1, Kind: KindRead, ID: 1}, nil},
		{Frame{Version: 0, Kind: KindHello}, nil},
		{Frame{Version: 2, Kind: KindRead, ID: 1}, ErrVersion},
		{Frame{Version: 1, Kind: KindHello}, ErrVersion},
		{Frame{Version: 1, Kind: 0, ID: 1}, ErrProtocol},
		{Frame{Version: 1, Kind: maxKind + 1, ID: 1}, ErrProtocol},
		{Frame{Version: 1, Kind: KindRead}, ErrProtocol},
		{Frame{Version: 1, Kind: KindKeepAlive, ID: 3}, ErrProtocol},
		{Frame{Version: 1, Kind: KindTimeToLive, ID: 1}, ErrProtocol}, // a version 2 kind
	}
	for _, c := range cases {
		err := checkFrame(c.f, 1)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%+v: err %v, want %v", c.f, err, c.want)
		}
	}
}

func TestCheckFrameVersion2(t *testing.T) {
	for _, f := range []Frame{{Version: 2, Kind: KindTimeToLive, ID: 1}, {Version: 2, Kind: KindRead, ID: 1}} {
		if err := checkFrame(f, 2); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
	if err := checkFrame(Frame{Version: 2, Kind: KindTimeToLive}, 2); !errors.Is(err, ErrProtocol) {
		t.Errorf("a request without an ID: %v", err)
	}
}

func TestAppendFrameTooLarge(t *testing.T) {
	b := []byte("keep")
	got, err := AppendFrame(b, 1, 1, &Propose{Command: make([]byte, 100)}, 50)
	if !errors.Is(err, ErrFrameTooLarge) || string(got) != "keep" {
		t.Fatalf("err %v, buffer %q", err, got)
	}
}

func TestErrorCodesMatchSentinels(t *testing.T) {
	pairs := map[Code]error{
		CodeProtocol: ErrProtocol, CodeFrameTooLarge: ErrFrameTooLarge,
		CodeTooManyRequests: ErrTooManyRequests, CodeTooManyWatchers: ErrTooManyWatchers,
		CodeForbidden: ErrForbidden,
	}
	for c, s := range pairs {
		if err := error(&Error{Code: c}); !errors.Is(err, s) {
			t.Errorf("code %d is not %v", c, s)
		}
	}
	if errors.Is(&Error{Code: CodeConflict}, ErrProtocol) {
		t.Error("a root code matched a wire sentinel")
	}
	r := error(&RefusedError{Reason: RefuseVersion, Message: "no"})
	if !errors.Is(r, ErrRefused) || !errors.Is(r, ErrVersion) || !strings.Contains(r.Error(), "no") {
		t.Errorf("version refusal: %v", r)
	}
}
