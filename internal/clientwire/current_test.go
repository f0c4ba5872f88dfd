package clientwire

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A WatchesCurrent from the network lists each watch once, ascending, at
// a revision that can be: anything else ends the connection as a
// protocol violation, and decoding allocates no more than its bytes.
func TestWatchesCurrentRefusesWhatCannotBe(t *testing.T) {
	for _, c := range []struct {
		name    string
		payload []byte
	}{
		{"a negative revision", appendUvarint(appendVarint(nil, -1), 0)},
		{"an ID twice", appendUvarint(appendUvarint(appendUvarint(appendVarint(nil, 5), 2), 3), 0)},
		{"an ID of 0", appendUvarint(appendUvarint(appendVarint(nil, 5), 1), 0)},
		{"IDs past 2^64", appendUvarint(appendUvarint(appendUvarint(appendVarint(nil, 5), 2), 1<<63), 1<<63)},
		{"more IDs than bytes", appendUvarint(appendVarint(nil, 5), 1<<40)},
		{"bytes left over", append(appendUvarint(appendUvarint(appendVarint(nil, 5), 1), 3), 0)},
	} {
		if _, err := DecodeMessage(KindWatchesCurrent, c.payload); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", c.name, err)
		}
	}
}

// Below version 7 the kind does not exist, either way.
func TestWatchesCurrentUnknownBeforeItsVersion(t *testing.T) {
	b, err := AppendFrame(nil, NestedVersion, 0, &WatchesCurrent{Rev: 3, WatchIDs: []uint64{1}}, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFrame(b, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkFrame(f, NestedVersion); !errors.Is(err, ErrProtocol) {
		t.Fatalf("kind %d in version %d: %v, want ErrProtocol", f.Kind, NestedVersion, err)
	}
	f.Version = CurrentVersion
	if err := checkFrame(f, CurrentVersion); err != nil {
		t.Fatalf("in version %d: %v", CurrentVersion, err)
	}
}

// A report of more watches than one frame holds goes in several, each
// within the client's frame limit, together listing every watch once.
func TestWatchesCurrentSplitsToTheFrameLimit(t *testing.T) {
	per := maxCurrentIDs(MinMaxFrame)
	ids := make([]uint64, 3*per+7)
	for i := range ids {
		ids[i] = uint64(i+1) << 45 // long gaps: 7 bytes each
	}
	var got []uint64
	for len(ids) > len(got) {
		n := min(len(ids)-len(got), per)
		b, err := AppendFrame(nil, CurrentVersion, 0, &WatchesCurrent{Rev: 9, WatchIDs: ids[len(got) : len(got)+n]}, MinMaxFrame)
		if err != nil {
			t.Fatalf("a frame of %d IDs: %v", n, err)
		}
		f, err := ParseFrame(b, MinMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeMessage(f.Kind, f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.(*WatchesCurrent).WatchIDs...)
	}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("ID %d: %d, want %d", i, got[i], ids[i])
		}
	}
}

// reportingFake's watches report themselves current through their
// connection's reporter, when it has one, and say whether it had.
type reportingFake struct {
	*fakeHandler
	hadReporter chan bool
}

func (f *reportingFake) Watch(ctx context.Context, _ string, w *WatchStart, sink *WatchSink) error {
	rep := sink.Reporter()
	f.hadReporter <- rep != nil
	if rep != nil {
		if err := rep.WatchesCurrent(42, []uint64{sink.ID()}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// A version 7 connection carries one report for its watches, which the
// client hands to each listed watch as its own WatchProgress.
func TestWatchesCurrentReachesEachListedWatch(t *testing.T) {
	f := &reportingFake{fakeHandler: newFake(), hadReporter: make(chan bool, 4)}
	c, _ := dial(t, f, "alice", Limits{}, ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 2 {
		w, frames, err := chanWatch(ctx, c, &WatchStart{Prefix: "q/", ProgressInterval: time.Second}, 4)
		if err != nil {
			t.Fatal(err)
		}
		if !<-f.hadReporter {
			t.Fatal("a version 7 connection without a reporter")
		}
		select {
		case m := <-frames:
			p, ok := m.(*WatchProgress)
			if !ok || p.Rev != 42 || p.WatchID != w.ID() {
				t.Fatalf("watch %d got %#v, want its progress at 42", w.ID(), m)
			}
		case <-ctx.Done():
			t.Fatalf("watch %d: no progress", w.ID())
		}
	}
}

// A client of version 6 gets no reporter on its connection: its member
// reports each watch in a WatchProgress of its own, as before.
func TestNoReporterBeforeVersion7(t *testing.T) {
	f := &reportingFake{fakeHandler: newFake(), hadReporter: make(chan bool, 1)}
	conn, _ := serve(t, f, "old", Limits{})
	fr := newFrameReader(conn)
	b, _ := AppendFrame(nil, handshakeVersion, 0, &Hello{MinVersion: 1, MaxVersion: NestedVersion, MaxFrame: DefaultMaxFrame}, DefaultMaxFrame)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	if f, err := fr.read(DefaultMaxFrame); err != nil || f.Kind != KindWelcome {
		t.Fatalf("welcome: %+v, %v", f, err)
	}
	b, _ = AppendFrame(nil, NestedVersion, 1, &WatchStart{WatchID: 1, Prefix: "q/", ProgressInterval: time.Second}, DefaultMaxFrame)
	go conn.Write(b)
	select {
	case had := <-f.hadReporter:
		if had {
			t.Fatal("a version 6 connection has a reporter")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch never started")
	}
}
