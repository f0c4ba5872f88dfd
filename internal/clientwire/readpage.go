package clientwire

import "fmt"

// Paged reads (protocol version 4): a Read of a prefix with After or
// Limit, which coord.List's Limit and After options send, travels as
// KindReadPage and is answered with a ReadResult, as every Read. Its kind
// is refused on a connection below version 4 (checkFrame), so an older
// member never sees it; a client refuses to send one to such a member
// (ErrVersion) rather than receive the whole prefix.
const (
	KindReadPage Kind = 24 // request → ReadResult (version 4)

	// PageVersion is the first protocol version with paged reads.
	PageVersion uint8 = 4
)

// paged reports whether m travels as KindReadPage: it asks for a page (or
// is about to be decoded from one).
func (m *Read) paged() bool { return m.page || m.After != "" || m.Limit != 0 }

// A paged read's payload: str Key | bool Serializable | str After |
// uvarint Limit. It is always a prefix read.
func (m *Read) appendPage(b []byte) []byte {
	b = appendString(b, m.Key)
	b = appendBool(b, m.Serializable)
	b = appendString(b, m.After)
	return appendUvarint(b, uint64(m.Limit))
}

func (m *Read) decodePage(d *dec) {
	m.Key = d.Str()
	m.Prefix = true
	m.Serializable = d.Bool()
	m.After = d.Str()
	m.Limit = d.u32()
	m.page = false
}

// checkPaged refuses a paged read the member cannot serve: one of a
// single key, or any on a connection below version 4.
func (c *ClientConn) checkPaged(r *Read) error {
	if !r.paged() {
		return nil
	}
	if !r.Prefix {
		return fmt.Errorf("%w: After and Limit page a prefix read", ErrProtocol)
	}
	if v := c.welcome.Version; v < PageVersion {
		return fmt.Errorf("%w: member %q speaks version %d, a paged read needs %d", ErrVersion, c.welcome.Member, v, PageVersion)
	}
	return nil
}
