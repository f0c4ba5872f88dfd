package wirebytes

import (
	"encoding/binary"
	"math/bits"
)

// AppendString appends s as a uvarint length then its bytes.
func AppendString[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends v as a uvarint length+1 then its bytes, and nil as
// a single 0, so that nil and empty survive the round trip.
func AppendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

// AppendList appends a list header: count+1, or 0 for a nil list.
func AppendList(b []byte, n int, isNil bool) []byte {
	if isNil {
		return append(b, 0)
	}
	return binary.AppendUvarint(b, uint64(n)+1)
}

// AppendBool appends v as one byte, 0 or 1.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// UvarintLen is the encoded size of x as a uvarint.
func UvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// VarintLen is the encoded size of x as a zig-zag varint.
func VarintLen(x int64) int { return UvarintLen(uint64(x<<1) ^ uint64(x>>63)) }

// StringLen is the size AppendString writes for s.
func StringLen[S ~string | ~[]byte](s S) int { return UvarintLen(uint64(len(s))) + len(s) }

// BytesLen is the size AppendBytes writes for v.
func BytesLen(v []byte) int {
	if v == nil {
		return 1
	}
	return UvarintLen(uint64(len(v))+1) + len(v)
}

// ListLen is the size AppendList writes.
func ListLen(n int, isNil bool) int {
	if isNil {
		return 1
	}
	return UvarintLen(uint64(n) + 1)
}
