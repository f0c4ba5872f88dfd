package clientwire

import (
	"errors"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the frame parser and every decoder:
// they must not panic, must answer with this package's sentinels, and
// what decodes must encode back to a payload that decodes the same.
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := AppendFrame(nil, 1, 1, m, DefaultMaxFrame)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 10, 1, 99, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b, 1<<16)
		if err != nil {
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("parse: unexpected error %v", err)
			}
			return
		}
		_ = checkFrame(fr, 1)
		m, err := DecodeMessage(fr.Kind, fr.Payload)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("decode: unexpected error %v", err)
			}
			return
		}
		again, err := DecodeMessage(fr.Kind, AppendMessage(nil, m))
		if err != nil {
			t.Fatalf("re-decode of %T: %v", m, err)
		}
		if a, b := AppendMessage(nil, m), AppendMessage(nil, again); string(a) != string(b) {
			t.Fatalf("%T: encoding not stable", m)
		}
	})
}
