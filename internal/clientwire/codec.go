package clientwire

import (
	"encoding/binary"
	"math"

	"github.com/coordcell/coord/internal/wirebytes"
)

// The payload codec: unsigned varints, zig-zag varints for signed
// numbers, strings and byte slices as a length then the bytes, lists as a
// count then the elements. Every length and count is checked against the
// bytes left before anything is allocated, so a payload never makes the
// decoder allocate more than a small multiple of its own size.

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendBool(b []byte, v bool) []byte { return wirebytes.AppendBool(b, v) }

func appendString(b []byte, s string) []byte { return wirebytes.AppendString(b, s) }

// appendBytes writes nil as 0 and a slice of n bytes as n+1, so nil and
// empty values survive the round trip.
func appendBytes(b, v []byte) []byte { return wirebytes.AppendBytes(b, v) }

// dec reads a payload; errors wrap ErrProtocol. The first error sticks:
// later reads return zero values, so decoders check once at the end.
// Varints need not be minimal: this protocol never promised one encoding.
type dec struct {
	wirebytes.Reader
}

func newDec(payload []byte) dec { return dec{wirebytes.NewReader(payload, ErrProtocol)} }

func (d *dec) u32() uint32 { return uint32(d.UvarintMax(math.MaxUint32, "number")) }
