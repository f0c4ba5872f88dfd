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
//     each leader that holds office credits the time it did not hear from
//     it, and the next leader grants only what is left.
//
// The holder's side stays safe: a keep-alive is acknowledged only once its
// session's unheard time is committed as zero and leadership is confirmed
// after the keep-alive was sent, so every later leader grants at least
// TTL from the send, minus unheard time that itself postdates the send.
package sessions

import "time"

// Credit is unheard time to add to one session.
type Credit struct {
	ID      int64
	Unheard time.Duration
}

type entry struct {
	ttl           time.Duration
	deadline      time.Time
	lastHeard     time.Time // the latest of: the election, a keep-alive, the creation
	creditedUntil time.Time // the end of the span last credited
	unheard       bool      // the replicated unheard time may be non-zero
	heard         bool      // heard from (or created) during this term
	expiring      time.Time // when its expiry was last proposed; zero = never
	owner         string    // the member its keep-alives come from; "" until heard
}

// Table is the leader's session deadlines. It is not safe for concurrent
// use; the caller serialises access.
type Table struct {
	elected time.Time
	grace   time.Duration
	m       map[int64]*entry
}

// New returns an empty table for a leader elected at elected. grace is
// the least time any session is granted after the election: enough for a
// live holder to reach the new leader.
func NewTable(elected time.Time, grace time.Duration) *Table {
	return &Table{elected: elected, grace: grace, m: make(map[int64]*entry)}
}

// Load adds a session found in the replicated state at election, granting
// it its TTL from the election minus its unheard time (at least grace).
// A session already in the table (created meanwhile) is left alone.
func (t *Table) Load(id int64, ttl, unheard time.Duration) {
	if _, ok := t.m[id]; ok {
		return
	}
	grant := max(ttl-unheard, t.grace)
	t.m[id] = &entry{
		ttl: ttl, deadline: t.elected.Add(grant),
		lastHeard: t.elected, creditedUntil: t.elected, unheard: unheard > 0,
	}
}

// Add records a session created while this leader holds office.
func (t *Table) Add(id int64, ttl time.Duration, now time.Time) {
	t.m[id] = &entry{ttl: ttl, deadline: now.Add(ttl), lastHeard: now, creditedUntil: now, heard: true}
}

// Remove forgets a session that ended.
func (t *Table) Remove(id int64) { delete(t.m, id) }

// Len returns the number of sessions.
func (t *Table) Len() int { return len(t.m) }

// Heard records a keep-alive from member owner received at now (which
// may be earlier than keep-alives already recorded: one held while the
// table loaded). It reports whether the session is known, and whether
// its unheard time must be committed as zero (a KindSessionSeen) before
// the keep-alive may be acknowledged.
func (t *Table) Heard(id int64, owner string, now time.Time) (known, needsSeen bool) {
	e, ok := t.m[id]
	if !ok {
		return false, false
	}
	if d := now.Add(e.ttl); d.After(e.deadline) {
		e.deadline = d
	}
	if now.After(e.lastHeard) {
		e.lastHeard = now
	}
	e.owner = owner
	e.heard = true
	e.expiring = time.Time{}
	return true, e.unheard
}

// Seen records that the session's unheard time was committed as zero.
func (t *Table) Seen(id int64) {
	if e, ok := t.m[id]; ok {
		e.unheard = false
	}
}

// KeepAliveDivisor sets the holders' keep-alive interval: TTL/KeepAliveDivisor.
const KeepAliveDivisor = 4

// Credits returns, for every session silent for longer than a live
// holder would be, the unheard time not yet credited, and marks it
// credited. A live holder's member sends a keep-alive as soon as it sees
// a new leader, then every TTL/KeepAliveDivisor: so a session is silent
// when not heard within slack of the election, or within that interval
// plus slack of its last keep-alive. Sessions that keep in touch are left
// out, so a cell whose sessions are all alive produces no credits (and no
// log writes).
//
// Only time up to now-settle is credited. settle should cover how long a
// deposed leader can go on believing it leads after its successor is
// elected (about an election timeout with CheckQuorum, as voters wait
// that long after the old leader's last heartbeat): time before that
// precedes any later leader's election, so two leaders do not credit the
// same span and the holder's deadline needs little margin for it.
func (t *Table) Credits(now time.Time, slack, settle time.Duration) []Credit {
	var out []Credit
	cutoff := now.Add(-settle)
	for id, e := range t.m {
		from := e.creditedUntil
		if e.lastHeard.After(from) {
			from = e.lastHeard
		}
		quiet := slack
		if e.heard {
			quiet += e.ttl / KeepAliveDivisor
		}
		// Credit in spans of at least slack, so a dead session costs a
		// log entry per election timeout, not per tick.
		if span := cutoff.Sub(from); span >= slack && now.Sub(e.lastHeard) >= quiet {
			out = append(out, Credit{ID: id, Unheard: span})
			e.creditedUntil = cutoff
			e.unheard = true
		}
	}
	return out
}

// Expiry describes a session whose deadline passed, for the leader's log
// line when the cell ends it.
type Expiry struct {
	ID        int64
	Owner     string // "" if this leader never heard from it
	LastHeard time.Time
	TTL       time.Duration
}

// Due returns the sessions whose deadline passed, except those whose
// expiry was proposed less than retry ago, and marks them proposed.
// LastHeard is the election for a session not heard in this term.
func (t *Table) Due(now time.Time, retry time.Duration) []Expiry {
	var out []Expiry
	for id, e := range t.m {
		if now.Before(e.deadline) {
			continue
		}
		if !e.expiring.IsZero() && now.Sub(e.expiring) < retry {
			continue
		}
		e.expiring = now
		out = append(out, Expiry{ID: id, Owner: e.owner, LastHeard: e.lastHeard, TTL: e.ttl})
	}
	return out
}

// Deadline returns the session's deadline, or false if it is unknown.
func (t *Table) Deadline(id int64) (time.Time, bool) {
	e, ok := t.m[id]
	if !ok {
		return time.Time{}, false
	}
	return e.deadline, true
}
