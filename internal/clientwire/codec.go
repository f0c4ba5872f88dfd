package clientwire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The payload codec: unsigned varints, zig-zag varints for signed
// numbers, strings and byte slices as a length then the bytes, lists as a
// count then the elements. Every length and count is checked against the
// bytes left before anything is allocated, so a payload never makes the
// decoder allocate more than a small multiple of its own size.

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendBytes writes nil as 0 and a slice of n bytes as n+1, so nil and
// empty values survive the round trip.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

// dec reads a payload. The first error sticks: later reads return zero
// values, so decoders check err once at the end.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *dec) u8() uint8 {
	if len(d.b) == 0 {
		d.fail("truncated payload")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) bool() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad bool")
	return false
}

func (d *dec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bounded reads an unsigned number that must not exceed limit.
func (d *dec) bounded(limit uint64, what string) uint64 {
	v := d.uvarint()
	if v > limit {
		d.fail("%s %d above %d", what, v, limit)
		return 0
	}
	return v
}

func (d *dec) u32() uint32 { return uint32(d.bounded(math.MaxUint32, "number")) }

func (d *dec) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string length %d beyond the %d bytes left", n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// bytes copies, so a decoded message shares no memory with the frame.
func (d *dec) bytes() []byte {
	n := d.uvarint()
	if n == 0 {
		return nil
	}
	n--
	if n > uint64(len(d.b)) {
		d.fail("bytes length %d beyond the %d bytes left", n, len(d.b))
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b)
	d.b = d.b[n:]
	return v
}

// count reads a list's length; each element takes at least minSize
// bytes, so the count is bounded by the bytes left and so is what the
// caller allocates for it.
func (d *dec) count(minSize int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/minSize) {
		d.fail("count %d beyond the %d bytes left", n, len(d.b))
		return 0
	}
	return int(n)
}

// done fails unless the whole payload was read: trailing bytes mean the
// sender and receiver disagree on the layout.
func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}
