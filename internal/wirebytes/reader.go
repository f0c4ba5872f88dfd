package wirebytes

import (
	"encoding/binary"
	"fmt"
)

// Reader reads the layouts of this package from a byte slice. The zero
// Reader is not useful: make one with NewReader or NewMinimalReader.
type Reader struct {
	b        []byte
	err      error
	sentinel error
	// minimal refuses varints in a longer form than needed, for formats
	// that promise one encoding per value.
	minimal bool
}

// NewReader returns a Reader of b whose errors wrap sentinel.
func NewReader(b []byte, sentinel error) Reader {
	return Reader{b: b, sentinel: sentinel}
}

// NewMinimalReader is NewReader for a format in which each value has one
// encoding: a varint in a longer form than needed is an error.
func NewMinimalReader(b []byte, sentinel error) Reader {
	return Reader{b: b, sentinel: sentinel, minimal: true}
}

// Fail records an error (wrapping the sentinel) unless one is recorded
// already, and drops the bytes left so every later read returns zero.
// Decoders call it for what only they can check, such as a bad enum.
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", r.sentinel, fmt.Sprintf(format, args...))
	}
	r.b = nil
}

// Err returns the first error, or nil.
func (r *Reader) Err() error { return r.err }

// Len returns how many bytes are left.
func (r *Reader) Len() int { return len(r.b) }

// Rest returns the bytes left, without reading them.
func (r *Reader) Rest() []byte { return r.b }

// Done returns the first error, or an error if any bytes are left:
// trailing bytes mean writer and reader disagree on the layout.
func (r *Reader) Done() error {
	if r.err == nil && len(r.b) != 0 {
		r.Fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

// U8 reads one byte.
func (r *Reader) U8() byte {
	if len(r.b) == 0 {
		r.Fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Bool reads a byte that must be 0 or 1.
func (r *Reader) Bool() bool {
	switch v := r.U8(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		r.Fail("bool byte %#x", v)
		return false
	}
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.Fail("bad varint")
		return 0
	}
	// A last byte of zero means a longer form than needed.
	if r.minimal && n > 1 && r.b[n-1] == 0 {
		r.Fail("non-minimal varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a zig-zag signed varint.
func (r *Reader) Varint() int64 {
	u := r.Uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// UvarintMax reads an unsigned varint that must not exceed limit; what
// names it in the error.
func (r *Reader) UvarintMax(limit uint64, what string) uint64 {
	v := r.Uvarint()
	if v > limit {
		r.Fail("%s %d above %d", what, v, limit)
		return 0
	}
	return v
}

// Length reads a uvarint length that must fit in the bytes left.
func (r *Reader) Length() int {
	n := r.Uvarint()
	if n > uint64(len(r.b)) {
		r.Fail("length %d beyond the %d bytes left", n, len(r.b))
		return 0
	}
	return int(n)
}

// Take returns the next n bytes, which must be there, aliasing the input.
// Their capacity is capped, so appending to them cannot overwrite what
// follows.
func (r *Reader) Take(n int) []byte {
	if n < 0 || n > len(r.b) {
		r.Fail("%d bytes beyond the %d bytes left", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// Slice reads a string layout as bytes aliasing the input (see Take).
func (r *Reader) Slice() []byte { return r.Take(r.Length()) }

// Str reads a string layout into a new string.
func (r *Reader) Str() string { return string(r.Slice()) }

// View reads a bytes layout without copying: nil for nil, else bytes
// aliasing the input (see Take), empty but not nil for empty.
func (r *Reader) View() []byte {
	n := r.Uvarint()
	if n == 0 {
		return nil
	}
	n--
	if n > uint64(len(r.b)) {
		r.Fail("length %d beyond the %d bytes left", n, len(r.b))
		return nil
	}
	return r.Take(int(n))
}

// Bytes reads a bytes layout into a new slice, so that the value shares
// no memory with the input: nil for nil, empty but not nil for empty.
func (r *Reader) Bytes() []byte {
	v := r.View()
	if v == nil {
		return nil
	}
	c := make([]byte, len(v))
	copy(c, v)
	return c
}

// Count reads a count of elements that each take at least minSize bytes
// (minSize > 0), so the count is bounded by the bytes left, and so is
// whatever the caller allocates for it.
func (r *Reader) Count(minSize int) int {
	n := r.Uvarint()
	if n > uint64(len(r.b)/minSize) {
		r.Fail("count %d beyond the %d bytes left", n, len(r.b))
		return 0
	}
	return int(n)
}

// List reads a list header: the count, or -1 for a nil list. The count
// is bounded as Count's is.
func (r *Reader) List(minSize int) int {
	n := r.Uvarint()
	if n == 0 {
		return -1
	}
	n--
	if n > uint64(len(r.b)/minSize) {
		r.Fail("count %d beyond the %d bytes left", n, len(r.b))
		return -1
	}
	return int(n)
}
