// Package sessions keeps the leader's side of sessions: the deadline table
// (Table), the keep-alive messages, and Leader, which runs one term of it.
// Deadlines are kept in memory only: keep-alives never touch the Raft log
// (invariant 5 in ARCHITECTURE.md).
//
// What survives a change of leader is each session's "unheard" time, in
// the replicated state: how long leaders held office without hearing from
// it since one last did. A new leader grants every session its TTL from
// the election minus that time (never less than a grace period), so
//
//   - a session that was alive keeps at least a full TTL after a failover
//     (no mass expiry: its unheard time is zero once a leader heard it), and
//   - a dead session cannot be kept alive by leaders that keep changing:
//     each leader that holds office counts the time it did not hear from
//     it, and the next leader grants only what is left.
//
// Unheard time is counted with a session clock in the replicated state:
// the time leaders have held office, each adding its own tenure, measured
// on its own monotonic clock. A leader that finds a session silent writes
// a silence mark for it once (the clock when it was last heard); from
// then on its unheard time is the clock's advance since the mark, until a
// leader hears from it again (a seen mark lifts it). Silence thus costs
// one log write per session when it begins, and the clock a small entry
// now and then (further apart the longer the term lasts, see
// Table.Tick), whatever the number of silent sessions: not one credit per
// silent session per interval.
//
// The holder's side stays safe: a keep-alive is acknowledged only once its
// session's unheard time is committed as zero and leadership is confirmed
// after the keep-alive was sent, so every later leader grants at least
// TTL from the send, minus unheard time that itself postdates the send.
package sessions

import (
	"container/heap"
	"time"
)

// Mark is a silence mark: session ID found silent, last heard when the
// session clock read Since.
type Mark struct {
	ID    int64
	Since time.Duration
}

type entry struct {
	id        int64
	ttl       time.Duration
	deadline  time.Time
	lastHeard time.Time // the latest of: the election, a keep-alive, the creation
	// unheard is set while the replicated state may hold unheard time or
	// a silence mark for it, so a keep-alive needs a seen mark committed
	// before its ack.
	unheard bool
	// marked is set once the replicated state holds a silence mark for
	// it, or one this leader decided will give it one.
	marked bool
	// markSeq counts the marks decided for it, so a seen mark decided
	// before a later mark does not undo that mark when it completes.
	markSeq  uint32
	heard    bool      // heard from (or created) during this term
	expiring time.Time // when its expiry was last proposed; zero = never
	owner    string    // the member its keep-alives come from; "" until heard

	// at is the entry's key in the table's heap: a time at or before the
	// next moment it needs a look (a silence check, its deadline, a retry
	// of its expiry). Keep-alives only move those later, so they leave
	// the key alone; a look at an entry whose key passed recomputes it.
	at  time.Time
	idx int // its index in the heap
}

// Table is the leader's session deadlines. It is not safe for concurrent
// use; the caller serialises access.
//
// Its periodic work (Tick) is in proportion to the sessions that need it
// (found silent, past their deadline), not to the sessions held: entries
// wait in a heap ordered by when they next need a look, and a keep-alive
// costs a map lookup.
type Table struct {
	elected time.Time
	et      time.Duration // the election timeout: grace, slack, settle, retry
	m       map[int64]*entry
	h       entryHeap
	// clock is the replicated session clock as loaded at the election;
	// this term's reading is clock plus its tenure so far (less settle).
	clock time.Duration
	// written is the tenure (less settle) the clock was last written at
	// in this term; 0 = not yet.
	written time.Duration
	// marked counts the entries with marked set: while there are none,
	// the clock need not move.
	marked int
	// visits counts the entries Tick looked at, so tests can check that
	// the work grows with what is due, not with what is held.
	visits uint64
}

// NewTable returns an empty table for a leader elected at elected, with
// et the election timeout. et is the least time any session is granted
// after the election (enough for a live holder to reach the new leader),
// and the unit of the table's other margins (see Tick).
func NewTable(elected time.Time, et time.Duration) *Table {
	return &Table{elected: elected, et: et, m: make(map[int64]*entry)}
}

// SetClock records the replicated session clock as loaded at the
// election, before any Tick.
func (t *Table) SetClock(clock time.Duration) { t.clock = clock }

// Load adds a session found in the replicated state at election, granting
// it its TTL from the election minus its unheard time (at least the
// grace period). silent says the replicated state holds a silence mark
// for it. A session already in the table (created meanwhile) is left
// alone.
func (t *Table) Load(id int64, ttl, unheard time.Duration, silent bool) {
	if _, ok := t.m[id]; ok {
		return
	}
	grant := max(ttl-unheard, t.et)
	e := &entry{
		id: id, ttl: ttl, deadline: t.elected.Add(grant),
		lastHeard: t.elected, unheard: unheard > 0 || silent, marked: silent,
	}
	if silent {
		t.marked++
	}
	t.push(e)
}

// Add records a session created while this leader holds office.
func (t *Table) Add(id int64, ttl time.Duration, now time.Time) {
	if old, ok := t.m[id]; ok {
		t.Remove(old.id)
	}
	t.push(&entry{id: id, ttl: ttl, deadline: now.Add(ttl), lastHeard: now, heard: true})
}

func (t *Table) push(e *entry) {
	t.m[e.id] = e
	e.at = t.next(e)
	heap.Push(&t.h, e)
}

// Remove forgets a session that ended.
func (t *Table) Remove(id int64) {
	e, ok := t.m[id]
	if !ok {
		return
	}
	delete(t.m, id)
	heap.Remove(&t.h, e.idx)
	if e.marked {
		t.marked--
	}
}

// Len returns the number of sessions.
func (t *Table) Len() int { return len(t.m) }

// Heard records a keep-alive from member owner received at now (which
// may be earlier than keep-alives already recorded: one held while the
// table loaded). It reports whether the session is known, and whether
// its unheard time must be committed as zero (a KindSessionSeen) before
// the keep-alive may be acknowledged; seq identifies the marks decided so
// far, for Seen.
func (t *Table) Heard(id int64, owner string, now time.Time) (known, needsSeen bool, seq uint32) {
	e, ok := t.m[id]
	if !ok {
		return false, false, 0
	}
	if d := now.Add(e.ttl); d.After(e.deadline) {
		e.deadline = d
	}
	if now.After(e.lastHeard) {
		e.lastHeard = now
	}
	e.owner = owner
	e.heard = true
	// Every time above moved later: the key stays at or before the next
	// look, as it must, unless the retry of an expiry it replaces came
	// later than that (rare: a keep-alive after the deadline).
	if !e.expiring.IsZero() {
		e.expiring = time.Time{}
		e.at = t.next(e)
		heap.Fix(&t.h, e.idx)
	}
	return true, e.unheard, e.markSeq
}

// Seen records that the session's unheard time was committed as zero by a
// seen mark decided when its marks numbered seq (Heard): unless a silence
// mark was decided since, it is neither unheard nor marked any more.
func (t *Table) Seen(id int64, seq uint32) {
	e, ok := t.m[id]
	if !ok || e.markSeq != seq {
		return
	}
	e.unheard = false
	if e.marked {
		e.marked = false
		t.marked--
		// Its silence is looked for again, perhaps before its key.
		if at := t.next(e); at.Before(e.at) {
			e.at = at
			heap.Fix(&t.h, e.idx)
		}
	}
}

// Unmark undoes a silence mark decided with seq that did not reach the
// log: the session is looked at again and marked anew.
func (t *Table) Unmark(id int64, seq uint32) {
	e, ok := t.m[id]
	if !ok || e.markSeq != seq || !e.marked {
		return
	}
	e.marked = false
	t.marked--
	if at := t.next(e); at.Before(e.at) {
		e.at = at
		heap.Fix(&t.h, e.idx)
	}
}

// KeepAliveDivisor sets the holders' keep-alive interval: TTL/KeepAliveDivisor.
const KeepAliveDivisor = 4

// silentAt is when e counts as silent if not heard from by then. A live
// holder's member sends a keep-alive as soon as it sees a new leader,
// then every TTL/KeepAliveDivisor: so a session is silent when not heard
// within slack (half an election timeout) of the election, or within
// that interval plus slack of its last keep-alive. It is marked no
// earlier than settle (an election timeout) after it was last heard, so
// its mark is within the time the clock is written up to (Tick).
func (t *Table) silentAt(e *entry) time.Time {
	quiet := t.et / 2
	if e.heard {
		quiet += e.ttl / KeepAliveDivisor
	}
	return e.lastHeard.Add(max(quiet, t.et))
}

// next is the next moment e needs a look: its silence check (unless
// marked), its deadline, or the retry of its expiry.
func (t *Table) next(e *entry) time.Time {
	at := e.deadline
	if !e.expiring.IsZero() {
		if r := e.expiring.Add(2 * t.et); r.After(at) {
			at = r
		}
	}
	if !e.marked {
		if s := t.silentAt(e); s.Before(at) {
			at = s
		}
	}
	return at
}

// Expiry describes a session whose deadline passed, for the leader's log
// line when the cell ends it.
type Expiry struct {
	ID        int64
	Owner     string // "" if this leader never heard from it
	LastHeard time.Time
	TTL       time.Duration
}

// Work is what a Tick decided: the silence marks and the session clock to
// write (one KindSessionSilent; nothing when Write is false), and the
// sessions to expire.
type Work struct {
	// Marks are the sessions found silent, each with the session clock
	// when it was last heard.
	Marks []Mark
	// Clock is the session clock to write, when Write is set.
	Clock time.Duration
	Write bool
	// Due are the sessions whose deadline passed.
	Due []Expiry
	// seqs are the Marks' mark numbers, for Unmark.
	seqs []uint32
}

// MarkSeq returns the mark number of Marks[i], for Unmark.
func (w *Work) MarkSeq(i int) uint32 { return w.seqs[i] }

// Tick looks at the sessions whose time has come, as of now:
//
//   - a session silent for longer than a live holder would be (silentAt)
//     and not marked yet gets a silence mark, with the session clock when
//     it was last heard;
//   - the session clock is written up to this term's tenure less settle,
//     with the marks, or alone while marked sessions exist, each time the
//     tenure has doubled since it was last written (and at least slack
//     in): a term that lasts D counts at least about half of D less an
//     election timeout for its silent sessions, however short, in a
//     number of entries that grows with log D and not at all with the
//     sessions;
//   - a session past its deadline is due to expire, unless its expiry was
//     proposed less than two election timeouts ago; at most maxDue are
//     returned, the rest wait for the next Tick.
//
// Only time up to now less settle (an election timeout) is counted:
// settle covers how long a deposed leader can go on believing it leads
// after its successor is elected (about an election timeout with
// CheckQuorum, as voters wait that long after the old leader's last
// heartbeat): time before that precedes any later leader's election, so
// two leaders do not count the same span and the holder's deadline needs
// little margin for it.
func (t *Table) Tick(now time.Time, maxDue int) Work {
	var w Work
	tenure := now.Sub(t.elected) - t.et // what the clock may count
	for len(t.h) > 0 && !t.h[0].at.After(now) {
		e := t.h[0]
		t.visits++
		if now.Before(e.deadline) || !e.expiring.IsZero() && now.Sub(e.expiring) < 2*t.et {
			// Not due.
		} else if len(w.Due) < maxDue {
			e.expiring = now
			w.Due = append(w.Due, Expiry{ID: e.id, Owner: e.owner, LastHeard: e.lastHeard, TTL: e.ttl})
		} else {
			break // due, but enough for this tick: it stays at the top
		}
		if !e.marked && !now.Before(t.silentAt(e)) {
			e.marked, e.unheard = true, true
			e.markSeq++
			t.marked++
			w.Marks = append(w.Marks, Mark{ID: e.id, Since: t.clock + max(e.lastHeard.Sub(t.elected), 0)})
			w.seqs = append(w.seqs, e.markSeq)
		}
		e.at = t.next(e)
		heap.Fix(&t.h, 0)
	}
	slack := t.et / 2
	switch {
	case len(w.Marks) > 0:
		// silentAt is at least settle after the last hearing, so every
		// mark is at or below the clock written with it.
		w.Write = true
	case t.marked > 0 && tenure >= slack && tenure >= 2*t.written:
		w.Write = true
	}
	if w.Write {
		tenure = max(tenure, t.written)
		t.written = tenure
		w.Clock = t.clock + tenure
	}
	return w
}

// Deadline returns the session's deadline, or false if it is unknown.
func (t *Table) Deadline(id int64) (time.Time, bool) {
	e, ok := t.m[id]
	if !ok {
		return time.Time{}, false
	}
	return e.deadline, true
}

// entryHeap is a min-heap of entries by their key (at).
type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
