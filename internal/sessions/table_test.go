package sessions

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestNewLeaderGrantsTTLMinusUnheard(t *testing.T) {
	tb := NewTable(at(0), time.Second)
	tb.Load(1, 10*time.Second, 0, false)
	tb.Load(2, 10*time.Second, 4*time.Second, false)
	tb.Load(3, 10*time.Second, 30*time.Second, true)
	tb.Load(4, 10*time.Second, 0, true)
	d1, _ := tb.Deadline(1)
	d2, _ := tb.Deadline(2)
	d3, _ := tb.Deadline(3)
	require.Equal(t, at(10*time.Second), d1, "a session heard lately gets a full TTL from the election")
	require.Equal(t, at(6*time.Second), d2)
	require.Equal(t, at(time.Second), d3, "never less than the grace period")
	_, needsSeen, _ := tb.Heard(2, "m", at(time.Second))
	require.True(t, needsSeen, "its unheard time must be committed as zero before an ack")
	_, needsSeen, _ = tb.Heard(4, "m", at(time.Second))
	require.True(t, needsSeen, "so must its silence mark be lifted")
	_, needsSeen, _ = tb.Heard(1, "m", at(time.Second))
	require.False(t, needsSeen)
}

// due is the IDs of the sessions a Tick at now expires.
func due(tb *Table, now time.Time) []Expiry { return tb.Tick(now, 1<<20).Due }

func TestHeardExtendsAndDueExpires(t *testing.T) {
	tb := NewTable(at(0), time.Second)
	tb.Add(7, 3*time.Second, at(0))
	require.Empty(t, due(tb, at(2*time.Second)))
	known, _, _ := tb.Heard(7, "m1", at(2*time.Second))
	require.True(t, known)
	require.Empty(t, due(tb, at(4*time.Second)))
	want := []Expiry{{ID: 7, Owner: "m1", LastHeard: at(2 * time.Second), TTL: 3 * time.Second}}
	require.Equal(t, want, due(tb, at(5*time.Second)))
	require.Empty(t, due(tb, at(5500*time.Millisecond)), "not proposed again within retry")
	require.Equal(t, want, due(tb, at(7100*time.Millisecond)), "proposed again after two election timeouts")
	known, _, _ = tb.Heard(99, "m", at(0))
	require.False(t, known)
	// A keep-alive after the deadline (the expiry lost) takes it back.
	tb.Heard(7, "m1", at(7200*time.Millisecond))
	require.Empty(t, due(tb, at(10*time.Second)))
	require.Len(t, due(tb, at(10200*time.Millisecond)), 1)
}

// TestTickBoundsExpiries: of many sessions due at once, a Tick returns at
// most the number asked for; the rest are due at the next.
func TestTickBoundsExpiries(t *testing.T) {
	tb := NewTable(at(0), time.Second)
	for id := range int64(10) {
		tb.Add(id+1, 4*time.Second, at(0))
	}
	seen := map[int64]bool{}
	for _, n := range []int{4, 4, 2} {
		w := tb.Tick(at(5*time.Second), 4)
		require.Len(t, w.Due, n)
		for _, x := range w.Due {
			require.False(t, seen[x.ID], "session %d due twice", x.ID)
			seen[x.ID] = true
		}
	}
	require.Empty(t, tb.Tick(at(5*time.Second), 4).Due)
}

// TestLateHeldKeepAliveDoesNotMoveBack: a keep-alive held while the
// table loaded is recorded at its arrival, earlier than one recorded
// since; neither the deadline nor the last-heard time moves back.
func TestLateHeldKeepAliveDoesNotMoveBack(t *testing.T) {
	tb := NewTable(at(0), time.Second)
	tb.Add(7, 3*time.Second, at(0))
	tb.Heard(7, "m1", at(2*time.Second))
	tb.Heard(7, "m1", at(time.Second))
	d, _ := tb.Deadline(7)
	require.Equal(t, at(5*time.Second), d)
	require.Empty(t, due(tb, at(4900*time.Millisecond)))
	require.Equal(t, at(2*time.Second), due(tb, at(5*time.Second))[0].LastHeard)
}

func TestMarksOnlyForSilentSessions(t *testing.T) {
	tb := NewTable(at(0), time.Second)
	tb.SetClock(100 * time.Second)
	tb.Load(1, 8*time.Second, 0, false) // keeps in touch
	tb.Load(2, 8*time.Second, 0, false) // silent
	var marks []Mark
	for s := time.Duration(0); s <= 6*time.Second; s += 250 * time.Millisecond {
		tb.Heard(1, "m", at(s))
		w := tb.Tick(at(s), 0)
		for _, m := range w.Marks {
			require.Equal(t, int64(2), m.ID, "a session heard every keep-alive interval is never marked")
			require.True(t, w.Write)
			require.GreaterOrEqual(t, w.Clock, m.Since, "every mark is within the clock written with it")
		}
		marks = append(marks, w.Marks...)
	}
	require.Equal(t, []Mark{{ID: 2, Since: 100 * time.Second}}, marks,
		"not heard since the election: marked once, silent since the election")

	tb2 := NewTable(at(0), time.Second)
	tb2.Load(3, 8*time.Second, 0, false)
	tb2.Heard(3, "m", at(500*time.Millisecond))
	// Heard: silent only after TTL/4 + slack, and no sooner than settle.
	require.Empty(t, tb2.Tick(at(3*time.Second-time.Millisecond), 0).Marks)
	w := tb2.Tick(at(3*time.Second), 0)
	require.Equal(t, []Mark{{ID: 3, Since: 500 * time.Millisecond}}, w.Marks)
	require.Equal(t, 2*time.Second, w.Clock, "the clock is written up to the tenure less settle")
	seq := w.MarkSeq(0)
	require.Empty(t, tb2.Tick(at(4*time.Second), 0).Marks, "marked once")
	_, needsSeen, seenSeq := tb2.Heard(3, "m", at(4*time.Second))
	require.True(t, needsSeen)
	require.Equal(t, seq, seenSeq)
	tb2.Seen(3, seenSeq)
	_, needsSeen, _ = tb2.Heard(3, "m", at(4100*time.Millisecond))
	require.False(t, needsSeen, "seen: heard from again")
	require.Empty(t, tb2.Tick(at(6*time.Second), 0).Marks)
	w = tb2.Tick(at(6600*time.Millisecond), 0)
	require.Equal(t, []Mark{{ID: 3, Since: 4100 * time.Millisecond}}, w.Marks, "silent again: marked again")

	// A seen mark decided before a later silence mark does not undo it
	// (here the earlier mark did not reach the log, so it was made anew).
	_, _, old := tb2.Heard(3, "m", at(6700*time.Millisecond))
	require.Equal(t, w.MarkSeq(0), old)
	tb2.Unmark(3, old)
	w = tb2.Tick(at(10*time.Second), 0)
	require.Len(t, w.Marks, 1)
	tb2.Seen(3, old)
	_, needsSeen, _ = tb2.Heard(3, "m", at(10*time.Second))
	require.True(t, needsSeen, "the later mark stands")

	// A mark that did not reach the log is made again.
	tb3 := NewTable(at(0), time.Second)
	tb3.Load(4, 8*time.Second, 0, false)
	w = tb3.Tick(at(2*time.Second), 0)
	require.Len(t, w.Marks, 1)
	tb3.Unmark(4, w.MarkSeq(0))
	require.Equal(t, w.Marks, tb3.Tick(at(2100*time.Millisecond), 0).Marks)
}

// TestClockWrittenFurtherApart: while marked sessions exist, the clock is
// written each time the term's tenure (less settle) has doubled, from
// half an election timeout on; with none, never.
func TestClockWrittenFurtherApart(t *testing.T) {
	tb := NewTable(at(0), time.Second)
	tb.SetClock(time.Hour)
	tb.Load(1, time.Hour, 0, false)
	var writes []time.Duration
	for s := time.Duration(0); s <= 100*time.Second; s += 250 * time.Millisecond {
		tb.Heard(1, "m", at(s))
		if w := tb.Tick(at(s), 0); w.Write {
			writes = append(writes, w.Clock-time.Hour)
		}
	}
	require.Empty(t, writes, "no session silent: the clock stays")

	tb = NewTable(at(0), time.Second)
	tb.SetClock(time.Hour)
	tb.Load(1, time.Hour, 0, true) // marked in an earlier term
	for s := time.Duration(0); s <= 100*time.Second; s += 250 * time.Millisecond {
		if w := tb.Tick(at(s), 0); w.Write {
			require.Empty(t, w.Marks)
			writes = append(writes, w.Clock-time.Hour)
		}
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{500 * ms, 1000 * ms, 2000 * ms, 4000 * ms, 8000 * ms, 16 * time.Second,
		32 * time.Second, 64 * time.Second}, writes)
}

func TestWireRoundTripAndMalformed(t *testing.T) {
	b, err := Encode(&Message{KeepAlive: &KeepAlive{Seq: 3, IDs: []int64{1, 2}}})
	require.NoError(t, err)
	m, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, uint64(3), m.KeepAlive.Seq)
	for _, bad := range [][]byte{nil, {9}, {wireVersion}, {wireVersion, 0x80}, append([]byte{wireVersion}, b[1:3]...)} {
		_, err := Decode(bad)
		require.ErrorIs(t, err, ErrMalformed)
	}
}

// A keep-alive claiming far more bytes than it holds is refused before
// msgpack allocates for the claim (msgpack would allocate and keep up to
// 1 MB per such message in its pooled decoder).
func TestWireRefusesLyingLengthsCheaply(t *testing.T) {
	// A map {"ka": bin32 of 1 GiB} with no payload.
	lying := []byte{wireVersion, 0x81, 0xa2, 'k', 'a', 0xc6, 0x40, 0, 0, 0}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		_, err := Decode(lying)
		require.ErrorIs(t, err, ErrMalformed)
	}
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated by 100 refusals")
}
