package spi

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coordcell/coord/internal/command"
)

// nopKeeper is a Keeper that keeps nothing: the Holding under test is
// the table.
type nopKeeper struct{}

func (nopKeeper) Add(*Session)                                       {}
func (nopKeeper) Adopt(*Session) bool                                { return true }
func (nopKeeper) Remove(int64)                                       {}
func (nopKeeper) Renew(context.Context, *Session) (time.Time, error) { return time.Time{}, nil }
func (nopKeeper) Margin(time.Duration) time.Duration                 { return 0 }
func (nopKeeper) ProposeAsync(*command.Command)                      {}

// TestHoldingSentAndAnswered: a keep-alive's answer confirms the
// sessions kept here that it names, once; an answer to a keep-alive
// forgotten confirms nothing.
func TestHoldingSentAndAnswered(t *testing.T) {
	h := NewHolding[string]()
	now := time.Now()
	a := NewSession(1, time.Second, false, nopKeeper{}, nil, now, false)
	b := NewSession(2, time.Second, false, nopKeeper{}, nil, now, false)
	h.Add(a)
	h.Add(b)
	require.True(t, h.Has(1))
	require.ElementsMatch(t, []int64{1, 2}, h.IDs())

	sent := now.Add(time.Millisecond)
	seq := h.Sent(sent, 100*time.Millisecond, []int64{1, 2}, "with")
	require.True(t, a.Unconfirmed())
	batch, alive, gone, ok := h.Answered(seq, []int64{1, 3}, []int64{2})
	require.True(t, ok)
	require.Equal(t, "with", batch.With)
	require.Equal(t, sent, batch.At)
	require.Equal(t, []*Session{a}, alive, "3 is not kept here")
	require.Equal(t, []*Session{b}, gone)
	_, _, _, ok = h.Answered(seq, []int64{1}, nil)
	require.False(t, ok, "a keep-alive is answered once")

	h.Remove(2)
	require.False(t, h.Has(2))
}

// TestHoldingForgetsOldKeepAlives: a keep-alive unanswered for longer
// than the longest TTL and four election timeouts and a second is
// forgotten when the next is sent.
func TestHoldingForgetsOldKeepAlives(t *testing.T) {
	h := NewHolding[struct{}]()
	start := time.Now()
	h.Add(NewSession(1, 3*time.Second, false, nopKeeper{}, nil, start, false))
	et := 100 * time.Millisecond
	old := h.Sent(start, et, []int64{1}, struct{}{})
	kept := h.Sent(start.Add(2*time.Second), et, []int64{1}, struct{}{}) // within the TTL of 3s: old stays
	_, _, _, ok := h.Answered(old, nil, nil)
	require.True(t, ok)
	old = h.Sent(start.Add(2*time.Second), et, []int64{1}, struct{}{})
	h.Sent(start.Add(5*time.Second+time.Millisecond), et, []int64{1}, struct{}{})
	_, _, _, ok = h.Answered(old, nil, nil)
	require.False(t, ok, "sent 3s ago with a TTL of 3s: forgotten")
	_, _, _, ok = h.Answered(kept, nil, nil)
	require.False(t, ok)
}

// TestHoldingUrgent: a renew's urge lasts until the next keep-alive
// clears it.
func TestHoldingUrgent(t *testing.T) {
	h := NewHolding[struct{}]()
	h.Urge(7)
	require.True(t, h.Urgent(7))
	h.ClearUrgent()
	require.False(t, h.Urgent(7))
}

// TestRenewEvery: a renew asks again every interval until a keep-alive
// of the session is confirmed, and stops when told the holder closed.
func TestRenewEvery(t *testing.T) {
	now := time.Now()
	s := NewSession(1, time.Minute, true, nopKeeper{}, nil, now, false)
	asks := make(chan struct{}, 100)
	go func() {
		<-asks
		<-asks // confirmed at the second ask
		s.Confirmed(time.Now())
	}()
	until, err := RenewEvery(context.Background(), s, time.Millisecond, func() { asks <- struct{}{} }, nil, nil)
	require.NoError(t, err)
	require.True(t, until.After(now))

	closed := make(chan struct{})
	close(closed)
	_, err = RenewEvery(context.Background(), s, time.Hour, func() {}, closed, context.Canceled)
	require.ErrorIs(t, err, context.Canceled)
}

// TestHoldingChecksOnlyWhenDue: between the moments a session can enter
// jeopardy or expire, DueForCheck hands out nothing, so a holder of many
// sessions does not look at each every tick; a confirmation only moves
// those moments later, an Add makes the next check look, and a check
// that began before an Add does not skip the added session.
func TestHoldingChecksOnlyWhenDue(t *testing.T) {
	h := NewHolding[struct{}]()
	start := time.Now()
	ttl := time.Second
	a := NewSession(1, ttl, false, nopKeeper{}, nil, start, false)
	h.Add(a)

	local, gen := h.DueForCheck(start)
	require.Len(t, local, 1, "a session just added is checked")
	next := ExpiredHere(local, start, func(*Session) { t.Fatal("nothing expired") })
	require.Equal(t, start.Add(ttl/2+1), next, "jeopardy after half a TTL of silence comes first")
	h.CheckedUntil(next, gen)
	local, _ = h.DueForCheck(start.Add(ttl / 4))
	require.Nil(t, local, "nothing can happen before the jeopardy moment")

	// A session added while a check ran is not skipped by its answer.
	local, gen = h.DueForCheck(next)
	b := NewSession(2, ttl, false, nopKeeper{}, nil, start, false)
	h.Add(b)
	next = ExpiredHere(local, next, func(*Session) { t.Fatal("nothing expired") })
	require.True(t, a.inJeopard, "the check put a in jeopardy")
	require.Equal(t, start.Add(ttl), next, "then its expiry")
	h.CheckedUntil(next, gen)
	local, gen = h.DueForCheck(start.Add(ttl / 4))
	require.Len(t, local, 2, "the Add made the next check look")

	// A confirmation of both moves the next moment later; the check at
	// the old deadline would then find nothing to do, and the new one is
	// what CheckedUntil keeps.
	a.Confirmed(start.Add(ttl / 2))
	b.Confirmed(start.Add(ttl / 2))
	next = ExpiredHere(local, start.Add(ttl/4), func(*Session) { t.Fatal("nothing expired") })
	h.CheckedUntil(next, gen)
	require.Equal(t, start.Add(ttl/2+ttl/2+1), next)

	// At the deadline each session expires, and is handed out to be.
	var expired []int64
	local, gen = h.DueForCheck(start.Add(3 * ttl / 2))
	next = ExpiredHere(local, start.Add(3*ttl/2), func(s *Session) { expired = append(expired, s.ID()) })
	require.ElementsMatch(t, []int64{1, 2}, expired)
	h.CheckedUntil(next, gen)

	// A session being confirmed can end at any time: every check looks.
	c := NewSession(3, ttl, false, nopKeeper{}, nil, start, true)
	h.Add(c)
	local, gen = h.DueForCheck(start)
	next = ExpiredHere(local, start, func(*Session) {})
	require.True(t, next.IsZero())
	h.CheckedUntil(next, gen)
	local, _ = h.DueForCheck(start)
	require.NotEmpty(t, local)
}
