// Package wirebytes is the one vocabulary for the hand-rolled binary
// formats of coord: commands, the client protocol and storage records.
//
// A Reader reads hostile bytes: its first error sticks and every later
// read returns a zero value, so a decoder checks once per stretch, and
// every length and count is checked against the bytes left before
// anything is allocated for it, so input of n bytes never makes a decoder
// allocate more than a small multiple of n. The Append functions write
// what the Reader reads. Each format wraps its own sentinel error, which
// the Reader takes, so errors.Is keeps working for each caller.
//
// The layouts:
//
//	uvarint  encoding/binary's unsigned varint
//	varint   encoding/binary's zig-zag signed varint
//	string   uvarint length | bytes                 (AppendString, Str, Slice)
//	bytes    uvarint length+1, 0 for nil | bytes    (AppendBytes, Bytes, View)
//	count    uvarint count                          (Count)
//	list     uvarint count+1, 0 for nil             (AppendList, List)
//	bool     one byte, 0 or 1                       (AppendBool, Bool)
package wirebytes
