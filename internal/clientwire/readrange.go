package clientwire

import "fmt"

// Ranged reads (protocol version 5): a Read with any of etcd's Range
// options (a past revision, a [start, end) range, keys or count only, a
// sort, the revision filters, a count) travels as KindReadRange and is
// answered with a KindRangeResult, a ReadResult with the count and, for
// a revision older than the member's history, the oldest one it holds.
// Both kinds are refused on a connection below version 5 (checkFrame);
// a client refuses to send one to such a member (ErrVersion) rather than
// have the options ignored.
const (
	KindReadRange   Kind = 25 // request → RangeResult (version 5)
	KindRangeResult Kind = 26 // response (version 5)

	// RangeVersion is the first protocol version with ranged reads.
	RangeVersion uint8 = 5
)

// The flags byte of a ranged read.
const (
	rangeKeysOnly uint8 = 1 << iota
	rangeCountOnly
	rangeCount
	rangeDescend
	rangeFlags = rangeKeysOnly | rangeCountOnly | rangeCount | rangeDescend
)

// RangeOptions are a ranged read's options beyond a Read's own, as
// internal/spi.ReadOptions has them (a Read with Ranged set carries them).
type RangeOptions struct {
	// End, when not "", ends the range [Key, End) ("\x00": every key
	// from Key on); "" with Prefix reads the prefix Key, without it the
	// key alone.
	End       string
	Rev       int64
	KeysOnly  bool
	CountOnly bool
	// Count asks for ReadResult.Count.
	Count       bool
	SortTarget  uint8
	SortDescend bool
	// Revision filters, inclusive; 0: no bound.
	MinModRev, MaxModRev, MinCreateRev, MaxCreateRev int64
}

// A ranged read's payload: str Key | bool Prefix | bool Serializable |
// str After | uvarint Limit | str End | varint Rev | u8 flags | u8 sort
// target | varint MinModRev, MaxModRev, MinCreateRev, MaxCreateRev.
func (m *Read) appendRange(b []byte) []byte {
	o := &m.Range
	b = appendString(b, m.Key)
	b = appendBool(appendBool(b, m.Prefix), m.Serializable)
	b = appendString(b, m.After)
	b = appendUvarint(b, uint64(m.Limit))
	b = appendString(b, o.End)
	b = appendVarint(b, o.Rev)
	var flags uint8
	for _, f := range []struct {
		on  bool
		bit uint8
	}{{o.KeysOnly, rangeKeysOnly}, {o.CountOnly, rangeCountOnly}, {o.Count, rangeCount}, {o.SortDescend, rangeDescend}} {
		if f.on {
			flags |= f.bit
		}
	}
	b = append(b, flags, o.SortTarget)
	for _, v := range []int64{o.MinModRev, o.MaxModRev, o.MinCreateRev, o.MaxCreateRev} {
		b = appendVarint(b, v)
	}
	return b
}

func (m *Read) decodeRange(d *dec) {
	o := &m.Range
	m.Key = d.Str()
	m.Prefix, m.Serializable = d.Bool(), d.Bool()
	m.After = d.Str()
	m.Limit = d.u32()
	o.End = d.Str()
	o.Rev = d.Varint()
	flags := d.U8()
	if flags&^rangeFlags != 0 {
		d.Fail("ranged read flags %#x", flags)
	}
	o.KeysOnly, o.CountOnly = flags&rangeKeysOnly != 0, flags&rangeCountOnly != 0
	o.Count, o.SortDescend = flags&rangeCount != 0, flags&rangeDescend != 0
	o.SortTarget = d.U8()
	o.MinModRev, o.MaxModRev, o.MinCreateRev, o.MaxCreateRev = d.Varint(), d.Varint(), d.Varint(), d.Varint()
	m.Ranged = true
}

// A ranged read's result: KVs | varint Rev | varint Count | varint
// CompactRev.
func (m *ReadResult) appendRange(b []byte) []byte {
	b = appendVarint(appendKVs(b, m.KVs), m.Rev)
	return appendVarint(appendVarint(b, m.Count), m.CompactRev)
}

func (m *ReadResult) decodeRange(d *dec) {
	m.KVs = d.kvs()
	m.Rev, m.Count, m.CompactRev = d.Varint(), d.Varint(), d.Varint()
	m.Ranged = true
}

// checkRanged refuses a ranged read on a connection below version 5.
func (c *ClientConn) checkRanged(r *Read) error {
	if r.Ranged {
		if v := c.welcome.Version; v < RangeVersion {
			return fmt.Errorf("%w: member %q speaks version %d, a ranged read (WithRev, Range, KeysOnly, CountOnly, "+
				"Counted, SortBy, the revision filters) needs %d", ErrVersion, c.welcome.Member, v, RangeVersion)
		}
	}
	return nil
}
