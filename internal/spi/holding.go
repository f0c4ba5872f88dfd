package spi

import (
	"context"
	"iter"
	"maps"
	"slices"
	"time"
)

// Holding is the core that a member's and a client's keep-alive engines
// share: the sessions a holder keeps alive, those a renew waits on, and
// the keep-alives sent and not yet answered, with what sending and an
// answer do to them. The engines differ in where a keep-alive goes (the
// leader, or the client's member), when it goes, and what rides with it
// (W: a member's batch carries the client keep-alives folded into it).
//
// A Holding is not safe for concurrent use: its engine's lock guards it,
// and it never calls out (Session.End, which calls back into the engine,
// is the engine's to call after it lets go of its lock).
type Holding[W any] struct {
	local  map[int64]*Session
	urgent map[int64]struct{}
	seq    uint64
	sent   map[uint64]Batch[W]
	maxTTL time.Duration // the longest TTL of a session kept so far
	// checkAt is when a session kept can first have entered jeopardy or
	// expired since the last check (zero: at the next one); gen counts
	// the sessions added, so that a check that began before an Add does
	// not push checkAt past the new session's deadline.
	checkAt time.Time
	gen     uint64
}

// Batch is a keep-alive sent and not yet answered.
type Batch[W any] struct {
	At   time.Time // when it left
	IDs  []int64
	With W
}

// NewHolding returns an empty Holding.
func NewHolding[W any]() *Holding[W] {
	return &Holding[W]{local: make(map[int64]*Session), urgent: make(map[int64]struct{}),
		sent: make(map[uint64]Batch[W])}
}

// Add keeps s (replacing a session of its ID).
func (h *Holding[W]) Add(s *Session) {
	h.local[s.ID()] = s
	h.maxTTL = max(h.maxTTL, s.TTL())
	h.gen++
	h.checkAt = time.Time{}
}

// Get returns the session of id, if it is kept.
func (h *Holding[W]) Get(id int64) (*Session, bool) {
	s, ok := h.local[id]
	return s, ok
}

// Has reports whether a session of id is kept.
func (h *Holding[W]) Has(id int64) bool {
	_, ok := h.local[id]
	return ok
}

// Remove stops keeping session id.
func (h *Holding[W]) Remove(id int64) { delete(h.local, id) }

// All is every session kept, by ID, in no order.
func (h *Holding[W]) All() iter.Seq2[int64, *Session] { return maps.All(h.local) }

// Sessions returns every session kept, for the engine to act on once it
// lets go of its lock.
func (h *Holding[W]) Sessions() []*Session { return slices.Collect(maps.Values(h.local)) }

// IDs returns the IDs of every session kept.
func (h *Holding[W]) IDs() []int64 { return slices.Collect(maps.Keys(h.local)) }

// Urge has the next keep-alive carry session id, even if it is manual
// (renewed only on demand): a renew waits on it.
func (h *Holding[W]) Urge(id int64) { h.urgent[id] = struct{}{} }

// UrgentIDs is every session a renew waits on, in no order.
func (h *Holding[W]) UrgentIDs() iter.Seq[int64] { return maps.Keys(h.urgent) }

// DueForCheck returns the sessions for ExpiredHere to check at now, or
// none when no session kept can have entered jeopardy or expired since
// the last check: a confirmation only moves those moments later, so a
// holder of many sessions does not look at each of them every tick. gen
// goes back to CheckedUntil with ExpiredHere's answer.
func (h *Holding[W]) DueForCheck(now time.Time) (local []*Session, gen uint64) {
	if !h.checkAt.IsZero() && now.Before(h.checkAt) {
		return nil, h.gen
	}
	return h.Sessions(), h.gen
}

// CheckedUntil records ExpiredHere's answer for the sessions DueForCheck
// returned with gen: none of them needs looking at before next (zero:
// at every check), unless sessions were added since.
func (h *Holding[W]) CheckedUntil(next time.Time, gen uint64) {
	if gen == h.gen {
		h.checkAt = next
	}
}

// Urgent reports whether a renew waits on session id.
func (h *Holding[W]) Urgent(id int64) bool {
	_, ok := h.urgent[id]
	return ok
}

// ClearUrgent forgets the renews waiting, once a keep-alive carries them.
func (h *Holding[W]) ClearUrgent() { clear(h.urgent) }

// Sent records a keep-alive of ids leaving at now, carrying w, and
// returns its sequence number. It forgets the keep-alives unanswered for
// longer than both the longest TTL and four election timeouts et and a
// second (the leader moved on or the message was lost): an ack confirms
// its send time plus the TTL, so one that arrives late, from a loaded
// leader, is worth having while that lies ahead.
func (h *Holding[W]) Sent(now time.Time, et time.Duration, ids []int64, w W) uint64 {
	h.seq++
	h.sent[h.seq] = Batch[W]{At: now, IDs: ids, With: w}
	for s, b := range h.sent {
		if now.Sub(b.At) > max(4*et+time.Second, h.maxTTL) {
			delete(h.sent, s)
		}
	}
	for _, id := range ids {
		if s, ok := h.local[id]; ok {
			s.MarkSent(now)
		}
	}
	return h.seq
}

// Answered takes the keep-alive seq out of those awaiting an answer and
// returns it with the sessions kept here that the answer confirms
// (alive) and says the cell no longer knows (gone); ok is false for a
// keep-alive forgotten or never sent, whose answer confirms nothing.
func (h *Holding[W]) Answered(seq uint64, alive, gone []int64) (b Batch[W], confirmed, ended []*Session, ok bool) {
	b, ok = h.sent[seq]
	delete(h.sent, seq)
	if !ok {
		return b, nil, nil, false
	}
	for _, id := range alive {
		if s, ok := h.local[id]; ok {
			confirmed = append(confirmed, s)
		}
	}
	for _, id := range gone {
		if s, ok := h.local[id]; ok {
			ended = append(ended, s)
		}
	}
	return b, confirmed, ended, true
}

// RenewEvery asks (urge: have the next keep-alive carry s) and waits
// until a keep-alive of s is confirmed, asking again every interval; it
// returns s's new Until, or why it stopped: ctx's end, s's end, or
// closed (nil: never) with closedErr.
func RenewEvery(ctx context.Context, s *Session, interval time.Duration, urge func(),
	closed <-chan struct{}, closedErr error) (time.Time, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		acked := s.AckChan()
		urge()
		select {
		case <-acked:
			return s.Until(), nil
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-s.Done():
			return time.Time{}, s.Err()
		case <-closed:
			return time.Time{}, closedErr
		case <-t.C:
		}
	}
}

// ExpiredHere checks each of local at now (jeopardy, local expiry) and
// calls expired for each that expired here: its holder then ends it in
// the cell, so that its locks pass on without waiting for the leader to
// notice. It returns when the next of them can enter jeopardy or expire
// (zero: any time, as while one is being confirmed), for
// Holding.CheckedUntil.
func ExpiredHere(local []*Session, now time.Time, expired func(*Session)) (next time.Time) {
	always := false
	for _, s := range local {
		if s.Check(now) {
			expired(s)
			continue
		}
		at, ok := s.NextCheck()
		switch {
		case !ok:
			always = true
		case next.IsZero() || at.Before(next):
			next = at
		}
	}
	if always {
		return time.Time{}
	}
	return next
}
