package watch

import "github.com/coordcell/coord/storage"

// The recent revisions kept for new groups: a few hundred revisions (a
// new watch usually starts a handful behind the head), and never more
// than this many bytes of values, so big values do not pin memory.
const (
	recentRevisions = 256
	recentMaxBytes  = 1 << 20
)

// recentRing holds the last revisions published, oldest first, within
// recentRevisions and recentMaxBytes. A ring, so that remembering a
// revision neither allocates nor moves the ones kept. It is used only
// under the hub's lock and never handed out: join copies event pointers
// out of it, not the ring's slots.
type recentRing struct {
	buf      []storage.Revision // allocated at the first push
	first, n int
	bytes    int
}

// push adds r as the newest revision, forgetting the oldest beyond the
// bounds.
func (q *recentRing) push(r storage.Revision) {
	if q.buf == nil {
		q.buf = make([]storage.Revision, recentRevisions)
	}
	if q.n == len(q.buf) {
		q.dropOldest()
	}
	q.buf[(q.first+q.n)%len(q.buf)] = r
	q.n++
	q.bytes += revisionBytes(r)
	for q.bytes > recentMaxBytes && q.n > 0 {
		q.dropOldest()
	}
}

func (q *recentRing) dropOldest() {
	q.bytes -= revisionBytes(q.buf[q.first])
	q.buf[q.first] = storage.Revision{} // pin no values
	q.first = (q.first + 1) % len(q.buf)
	q.n--
}

// len returns how many revisions are kept.
func (q *recentRing) len() int { return q.n }

// at returns the i-th oldest revision kept.
func (q *recentRing) at(i int) *storage.Revision { return &q.buf[(q.first+i)%len(q.buf)] }

// reset forgets every revision.
func (q *recentRing) reset() {
	clear(q.buf)
	q.first, q.n, q.bytes = 0, 0, 0
}

func revisionBytes(r storage.Revision) int {
	n := 0
	for _, ev := range r.Events {
		n += len(ev.KV.Key) + len(ev.KV.Value)
		if ev.Prev != nil {
			n += len(ev.Prev.Value)
		}
	}
	return n
}
