// Package mpcheck guards msgpack decoding of untrusted bytes: Check
// refuses, before any allocation, input whose declared lengths exceed what
// it holds.
package mpcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Check walks the first msgpack value of data and refuses it if a
// string, binary, extension, array or map claims more than the bytes left
// can hold. msgpack (v5.3.6) trusts such claims: for a declared length it
// allocates up to 1 MB before reading and, on running out of input, keeps
// the grown buffer in its pooled decoder, so every such input grows a
// decoder that the next Unmarshal reuses, without bound. Checked here,
// msgpack only ever reads lengths that the input holds. Anything refused
// here msgpack would refuse too, after allocating: the whole first value
// must be present for it to decode.
func Check(data []byte) error {
	b := data
	// pending counts the values still to walk. Each takes at least one
	// byte, so pending may never exceed len(b), and neither may a count.
	pending := 1
	for pending > 0 {
		if len(b) == 0 {
			return errors.New("truncated msgpack")
		}
		c := b[0]
		b = b[1:]
		pending--
		var skip, count uint64 // bytes to skip, values to add
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			// fixint, nil, bool: the code is the value
		case c <= 0x8f:
			count = 2 * uint64(c&0x0f)
		case c <= 0x9f:
			count = uint64(c & 0x0f)
		case c <= 0xbf:
			skip = uint64(c & 0x1f)
		default:
			n, ok := msgpackLen(c, b)
			if !ok {
				return fmt.Errorf("msgpack code %#x", c)
			}
			b = b[n.header:]
			skip, count = n.skip, n.count
		}
		if skip > uint64(len(b)) {
			return fmt.Errorf("msgpack length %d beyond the %d bytes left", skip, len(b))
		}
		b = b[skip:]
		if count+uint64(pending) > uint64(len(b)) {
			return fmt.Errorf("msgpack count %d beyond the %d bytes left", count+uint64(pending), len(b))
		}
		pending += int(count)
	}
	return nil
}

// msgpackSize is what follows a code from 0xc1 to 0xdf: header bytes
// (length or count fields, an extension's type), then skip bytes of
// payload, or count more values.
type msgpackSize struct {
	header      int
	skip, count uint64
}

// msgpackLen reads the header after code c from b; ok is false for the
// unused code 0xc1 and for a header cut short.
func msgpackLen(c byte, b []byte) (msgpackSize, bool) {
	// width of the length field, extra header bytes after it, fixed
	// payload, and whether the length counts values (and how many per
	// entry) rather than bytes.
	var width, extra, fixed, per int
	switch c {
	case 0xc4, 0xd9: // bin8, str8
		width = 1
	case 0xc5, 0xda: // bin16, str16
		width = 2
	case 0xc6, 0xdb: // bin32, str32
		width = 4
	case 0xc7, 0xc8, 0xc9: // ext8, ext16, ext32
		width, extra = 1<<(c-0xc7), 1
	case 0xca: // float32
		fixed = 4
	case 0xcb: // float64
		fixed = 8
	case 0xcc, 0xcd, 0xce, 0xcf: // uint8..uint64
		fixed = 1 << (c - 0xcc)
	case 0xd0, 0xd1, 0xd2, 0xd3: // int8..int64
		fixed = 1 << (c - 0xd0)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext1..fixext16
		extra, fixed = 1, 1<<(c-0xd4)
	case 0xdc, 0xdd: // array16, array32
		width, per = 2<<(c-0xdc), 1
	case 0xde, 0xdf: // map16, map32
		width, per = 2<<(c-0xde), 2
	default: // 0xc1: never used
		return msgpackSize{}, false
	}
	if len(b) < width+extra {
		return msgpackSize{}, false
	}
	var n uint64
	switch width {
	case 1:
		n = uint64(b[0])
	case 2:
		n = uint64(binary.BigEndian.Uint16(b))
	case 4:
		n = uint64(binary.BigEndian.Uint32(b))
	}
	s := msgpackSize{header: width + extra}
	if per > 0 {
		s.count = n * uint64(per)
	} else {
		s.skip = n + uint64(fixed)
	}
	return s, true
}
