package wirebytes

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"runtime"
	"testing"
)

var errTest = errors.New("test: malformed")

// sample is one value of every layout, written by the appenders.
type sample struct {
	u8      byte
	u       uint64
	i       int64
	s       string
	b       []byte
	flag    bool
	counted []byte // count bytes, read with Count(1) and Take
	list    []int64
}

func appendSample(b []byte, s *sample) []byte {
	b = append(b, s.u8)
	b = appendUvarint(b, s.u)
	b = appendVarint(b, s.i)
	b = AppendString(b, s.s)
	b = AppendBytes(b, s.b)
	b = AppendBool(b, s.flag)
	b = appendUvarint(b, uint64(len(s.counted)))
	b = append(b, s.counted...)
	b = AppendList(b, len(s.list), s.list == nil)
	for _, v := range s.list {
		b = appendVarint(b, v)
	}
	return b
}

func readSample(r *Reader) sample {
	var s sample
	s.u8 = r.U8()
	s.u = r.Uvarint()
	s.i = r.Varint()
	s.s = r.Str()
	s.b = r.Bytes()
	s.flag = r.Bool()
	s.counted = r.Take(r.Count(1))
	if n := r.List(1); n >= 0 {
		s.list = make([]int64, n)
		for i := range s.list {
			s.list[i] = r.Varint()
		}
	}
	return s
}

func samples() []sample {
	return []sample{
		{counted: []byte{}},
		{u8: 0xff, u: math.MaxUint64, i: math.MinInt64, s: "key", b: []byte{}, flag: true, counted: []byte{1, 2}, list: []int64{}},
		{u8: 7, u: 300, i: -1, s: "", b: []byte("value"), counted: []byte{}, list: []int64{1, -2, math.MaxInt64}},
	}
}

func TestRoundTrip(t *testing.T) {
	for i, want := range samples() {
		enc := appendSample(nil, &want)
		for _, r := range []Reader{NewReader(enc, errTest), NewMinimalReader(enc, errTest)} {
			got := readSample(&r)
			if err := r.Done(); err != nil {
				t.Fatalf("sample %d: %v", i, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("sample %d: got %+v, want %+v", i, got, want)
			}
		}
	}
}

func TestSizes(t *testing.T) {
	for _, u := range []uint64{0, 1, 127, 128, 1 << 14, math.MaxUint64} {
		if got, want := UvarintLen(u), len(appendUvarint(nil, u)); got != want {
			t.Errorf("UvarintLen(%d) = %d, want %d", u, got, want)
		}
	}
	for _, i := range []int64{0, -1, 63, -64, 64, math.MinInt64, math.MaxInt64} {
		if got, want := VarintLen(i), len(appendVarint(nil, i)); got != want {
			t.Errorf("VarintLen(%d) = %d, want %d", i, got, want)
		}
	}
	for _, v := range [][]byte{nil, {}, make([]byte, 200)} {
		if got, want := BytesLen(v), len(AppendBytes(nil, v)); got != want {
			t.Errorf("BytesLen(len %d) = %d, want %d", len(v), got, want)
		}
		if got, want := StringLen(v), len(AppendString(nil, v)); got != want {
			t.Errorf("StringLen(len %d) = %d, want %d", len(v), got, want)
		}
	}
	for _, n := range []int{0, 1, 127, 128} {
		for _, isNil := range []bool{false, true} {
			if got, want := ListLen(n, isNil), len(AppendList(nil, n, isNil)); got != want {
				t.Errorf("ListLen(%d, %v) = %d, want %d", n, isNil, got, want)
			}
		}
	}
}

// Every proper prefix of a valid encoding fails, with the caller's
// sentinel, and without panicking.
func TestTruncation(t *testing.T) {
	for i, s := range samples() {
		enc := appendSample(nil, &s)
		for cut := range len(enc) {
			r := NewMinimalReader(enc[:cut], errTest)
			readSample(&r)
			if err := r.Done(); !errors.Is(err, errTest) {
				t.Fatalf("sample %d cut at %d of %d: err %v, want %v", i, cut, len(enc), err, errTest)
			}
		}
	}
}

func TestStickyError(t *testing.T) {
	r := NewReader([]byte{0x80}, errTest) // a varint that never ends
	if v := r.Uvarint(); v != 0 || r.Err() == nil {
		t.Fatalf("Uvarint = %d, err %v; want 0 and an error", v, r.Err())
	}
	first := r.Err()
	r.Fail("later")
	if r.U8() != 0 || r.Str() != "" || r.Bytes() != nil || r.List(1) != -1 || r.Len() != 0 {
		t.Fatal("reads after an error returned data")
	}
	if r.Err() != first {
		t.Fatalf("error changed from %v to %v", first, r.Err())
	}
}

func TestNonMinimalVarint(t *testing.T) {
	cases := map[string][]byte{
		"zero in two bytes": {0x80, 0x00},
		"one in three":      {0x81, 0x80, 0x00},
	}
	for name, b := range cases {
		r := NewMinimalReader(b, errTest)
		if r.Uvarint(); !errors.Is(r.Err(), errTest) {
			t.Errorf("%s: minimal reader err %v, want %v", name, r.Err(), errTest)
		}
		r = NewMinimalReader(b, errTest)
		if r.Varint(); !errors.Is(r.Err(), errTest) {
			t.Errorf("%s: minimal reader Varint err %v, want %v", name, r.Err(), errTest)
		}
		// Formats that never promised one encoding keep accepting them.
		r = NewReader(b, errTest)
		r.Uvarint()
		if err := r.Done(); err != nil {
			t.Errorf("%s: lax reader: %v", name, err)
		}
	}
	// Overflow is refused by both.
	over := append(bytes.Repeat([]byte{0xff}, 10), 0x01)
	for _, r := range []Reader{NewReader(over, errTest), NewMinimalReader(over, errTest)} {
		if r.Uvarint(); !errors.Is(r.Err(), errTest) {
			t.Errorf("overflow: err %v, want %v", r.Err(), errTest)
		}
	}
}

// A length or count larger than the input fails before anything is
// allocated for it: the bytes allocated stay far below the lie.
func TestLyingLengthsAllocateNothing(t *testing.T) {
	reads := map[string]func(r *Reader){
		"Str":        func(r *Reader) { r.Str() },
		"Slice":      func(r *Reader) { r.Slice() },
		"Bytes":      func(r *Reader) { r.Bytes() },
		"View":       func(r *Reader) { r.View() },
		"Count":      func(r *Reader) { r.Count(1) },
		"List":       func(r *Reader) { r.List(1) },
		"Length":     func(r *Reader) { r.Length() },
		"UvarintMax": func(r *Reader) { r.UvarintMax(1<<10, "n") },
	}
	const lie = 1 << 20
	for name, read := range reads {
		for _, n := range []uint64{lie, 1 << 40, math.MaxUint64} {
			in := append(appendUvarint(nil, n), "abc"...)
			var err error
			const runs = 10
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range runs {
				r := NewReader(in, errTest)
				read(&r)
				err = r.Err()
			}
			runtime.ReadMemStats(&after)
			if !errors.Is(err, errTest) {
				t.Errorf("%s(%d): err %v, want %v", name, n, err, errTest)
			}
			// Only the error message is allocated.
			if got := after.TotalAlloc - before.TotalAlloc; got > runs*4096 {
				t.Errorf("%s(%d): %d bytes allocated in %d reads", name, n, got, runs)
			}
		}
	}
	// Count bounds by the element's size: 3 bytes left hold one 2-byte element.
	r := NewReader([]byte{2, 0, 0, 0}, errTest)
	if r.Count(2); r.Err() == nil {
		t.Error("Count(2) accepted 2 elements in 3 bytes")
	}
}

func TestTakeIsCapped(t *testing.T) {
	enc := AppendString(AppendString(nil, "ab"), "cd")
	r := NewReader(enc, errTest)
	first := r.Slice()
	_ = append(first, 'X')
	if got := r.Str(); got != "cd" {
		t.Fatalf("append to a read slice changed the next value to %q", got)
	}
	if r.Take(-1); r.Err() == nil {
		t.Fatal("Take(-1) succeeded")
	}
}

func TestBytesCopies(t *testing.T) {
	enc := AppendBytes(nil, []byte("v"))
	r := NewReader(enc, errTest)
	v := r.Bytes()
	enc[len(enc)-1] = 'w'
	if string(v) != "v" {
		t.Fatalf("Bytes shares memory with the input: %q", v)
	}
}

func TestBoolAndMax(t *testing.T) {
	r := NewReader([]byte{2}, errTest)
	if r.Bool(); !errors.Is(r.Err(), errTest) {
		t.Errorf("Bool(2): err %v", r.Err())
	}
	r = NewReader([]byte{11}, errTest)
	if r.UvarintMax(10, "code"); !errors.Is(r.Err(), errTest) {
		t.Errorf("UvarintMax above the limit: err %v", r.Err())
	}
	r = NewReader([]byte{10, 1}, errTest)
	if v := r.UvarintMax(10, "code"); v != 10 || r.Err() != nil {
		t.Errorf("UvarintMax(10) = %d, %v", v, r.Err())
	}
	if err := r.Done(); !errors.Is(err, errTest) {
		t.Errorf("Done with a trailing byte: err %v", err)
	}
}

// FuzzReader reads arbitrary bytes as a sample: no panic, an error that
// wraps the sentinel, and anything accepted by the minimal reader
// encodes back to the same bytes.
func FuzzReader(f *testing.F) {
	for _, s := range samples() {
		f.Add(appendSample(nil, &s))
	}
	f.Add([]byte{0, 0x80, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewMinimalReader(in, errTest)
		s := readSample(&r)
		err := r.Done()
		if err != nil {
			if !errors.Is(err, errTest) {
				t.Fatalf("err %v does not wrap the sentinel", err)
			}
			return
		}
		if out := appendSample(nil, &s); !bytes.Equal(out, in) {
			t.Fatalf("accepted %x, which encodes as %x", in, out)
		}
	})
}
