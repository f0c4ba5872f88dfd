package clientwire

import (
	"errors"
	"testing"
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
