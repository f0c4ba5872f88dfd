package clientwire

import "fmt"

// Connection-wide progress (protocol version 7). A client asks each of
// its watches for a progress report about every election timeout, so
// that it resumes near the head after a move; with one WatchProgress a
// watch, a written cell sent every idle watch a frame each interval, and
// woke each one's goroutine on the member to send it: at 500,000 watches
// through 100 clients that alone kept two cores busy. From version 7 the
// member tells a connection's current watches in one WatchesCurrent
// frame: each watch it lists has been sent every change up to Rev. It
// lists a watch only when every frame of that watch up to Rev is already
// queued before this one on the connection (watch.Hub.Current), so the
// report never overtakes an event it covers.
const (
	KindWatchesCurrent Kind = 28 // member → client, stream (version 7)

	// CurrentVersion is the first protocol version with WatchesCurrent.
	CurrentVersion uint8 = 7
)

// WatchesCurrent tells the client that each watch of WatchIDs (strictly
// ascending) has delivered every change up to Rev.
type WatchesCurrent struct {
	Rev      int64
	WatchIDs []uint64
}

// Kind returns KindWatchesCurrent.
func (*WatchesCurrent) Kind() Kind { return KindWatchesCurrent }

// The IDs travel as the gaps between them, each at least 1: a few
// bytes an ID, and no ID twice.
func (m *WatchesCurrent) appendTo(b []byte) []byte {
	b = appendVarint(b, m.Rev)
	b = appendUvarint(b, uint64(len(m.WatchIDs)))
	var prev uint64
	for _, id := range m.WatchIDs {
		b = appendUvarint(b, id-prev)
		prev = id
	}
	return b
}

func (m *WatchesCurrent) decode(d *dec) {
	m.Rev = d.Varint()
	if m.Rev < 0 {
		d.Fail("revision %d", m.Rev)
		return
	}
	n := d.Count(1) // one byte an ID at least: bounded by the payload
	if n == 0 {
		return
	}
	m.WatchIDs = make([]uint64, n)
	var prev uint64
	for i := range m.WatchIDs {
		gap := d.Uvarint()
		if gap == 0 || prev+gap < prev {
			d.Fail("watch IDs not strictly ascending at %d", i)
			return
		}
		prev += gap
		m.WatchIDs[i] = prev
	}
}

// maxCurrentIDs is how many IDs one WatchesCurrent frame of at most
// maxFrame bytes surely holds (10 bytes an ID at most, and room for the
// rest).
func maxCurrentIDs(maxFrame int) int { return max((maxFrame-64)/10, 1) }

// ConnReporter sends a connection's WatchesCurrent frames.
type ConnReporter struct{ s *session }

// Reporter returns the reporter of the watch's connection, or nil when
// its client speaks a version without WatchesCurrent (it then needs a
// WatchProgress per watch).
func (w *WatchSink) Reporter() *ConnReporter {
	if w.s.out.version < CurrentVersion {
		return nil
	}
	return &ConnReporter{s: w.s}
}

// ID is the watch's ID on its connection.
func (w *WatchSink) ID() uint64 { return w.id }

// WatchesCurrent queues the report that each watch of ids (ascending)
// has delivered every change up to rev, in as many frames as the
// client's frame limit needs. An error means the report, or part of it,
// was not queued (the connection ended, or its queue is full): nothing
// else is affected, and a later report may say it again.
func (r *ConnReporter) WatchesCurrent(rev int64, ids []uint64) error {
	per := maxCurrentIDs(r.s.out.maxFrame)
	for len(ids) > 0 {
		n := min(len(ids), per)
		if _, err := r.s.out.push(0, &WatchesCurrent{Rev: rev, WatchIDs: ids[:n]}, nil); err != nil {
			return fmt.Errorf("clientwire: a progress report of %d watches: %w", n, err)
		}
		ids = ids[n:]
	}
	return nil
}
