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
	tb.Load(1, 10*time.Second, 0)
	tb.Load(2, 10*time.Second, 4*time.Second)
	tb.Load(3, 10*time.Second, 30*time.Second)
	d1, _ := tb.Deadline(1)
	d2, _ := tb.Deadline(2)
	d3, _ := tb.Deadline(3)
	require.Equal(t, at(10*time.Second), d1, "a session heard lately gets a full TTL from the election")
	require.Equal(t, at(6*time.Second), d2)
	require.Equal(t, at(time.Second), d3, "never less than the grace period")
	_, needsSeen := tb.Heard(2, "m", at(time.Second))
	require.True(t, needsSeen, "its unheard time must be committed as zero before an ack")
	_, needsSeen = tb.Heard(1, "m", at(time.Second))
	require.False(t, needsSeen)
}

func TestHeardExtendsAndDueExpires(t *testing.T) {
	tb := NewTable(at(0), time.Second)
	tb.Add(7, 3*time.Second, at(0))
	require.Empty(t, tb.Due(at(2*time.Second), time.Second))
	known, _ := tb.Heard(7, "m1", at(2*time.Second))
	require.True(t, known)
	require.Empty(t, tb.Due(at(4*time.Second), time.Second))
	want := []Expiry{{ID: 7, Owner: "m1", LastHeard: at(2 * time.Second), TTL: 3 * time.Second}}
	require.Equal(t, want, tb.Due(at(5*time.Second), time.Second))
	require.Empty(t, tb.Due(at(5500*time.Millisecond), time.Second), "not proposed again within retry")
	require.Equal(t, want, tb.Due(at(6100*time.Millisecond), time.Second))
	known, _ = tb.Heard(99, "m", at(0))
	require.False(t, known)
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
	require.Empty(t, tb.Due(at(4900*time.Millisecond), time.Second))
	require.Equal(t, at(2*time.Second), tb.Due(at(5*time.Second), time.Second)[0].LastHeard)
}

func TestCreditsOnlyForSilentSessions(t *testing.T) {
	tb := NewTable(at(0), time.Second)
	tb.Load(1, 3*time.Second, 0) // keeps in touch
	tb.Load(2, 3*time.Second, 0) // silent
	for s := time.Duration(0); s <= 6*time.Second; s += 500 * time.Millisecond {
		tb.Heard(1, "m", at(s))
		for _, c := range tb.Credits(at(s), 500*time.Millisecond, 0) {
			require.Equal(t, int64(2), c.ID, "a session heard every keep-alive interval is never credited")
		}
	}
	tb2 := NewTable(at(0), time.Second)
	tb2.Load(2, 4*time.Second, 0)
	require.Empty(t, tb2.Credits(at(400*time.Millisecond), 500*time.Millisecond, 0))
	c := tb2.Credits(at(500*time.Millisecond), 500*time.Millisecond, 0)
	require.Equal(t, []Credit{{ID: 2, Unheard: 500 * time.Millisecond}}, c,
		"not heard since the election: a live holder would have called at once")
	c = tb2.Credits(at(2*time.Second), 500*time.Millisecond, 0)
	require.Equal(t, []Credit{{ID: 2, Unheard: 1500 * time.Millisecond}}, c, "each span is credited once")
	tb2.Heard(2, "m", at(2100*time.Millisecond))
	require.Empty(t, tb2.Credits(at(3*time.Second), 500*time.Millisecond, 0), "heard: silent only after TTL/4 + slack")
	require.Empty(t, tb2.Credits(at(3100*time.Millisecond), 500*time.Millisecond, 0))
	c = tb2.Credits(at(3600*time.Millisecond), 500*time.Millisecond, 0)
	require.Equal(t, []Credit{{ID: 2, Unheard: 1500 * time.Millisecond}}, c)

	// With settle, only time settle ago or earlier is credited.
	tb3 := NewTable(at(0), time.Second)
	tb3.Load(3, 4*time.Second, 0)
	require.Empty(t, tb3.Credits(at(2*time.Second), 500*time.Millisecond, 2*time.Second))
	c = tb3.Credits(at(3*time.Second), 500*time.Millisecond, 2*time.Second)
	require.Equal(t, []Credit{{ID: 3, Unheard: time.Second}}, c)
	c = tb3.Credits(at(4*time.Second), 500*time.Millisecond, 2*time.Second)
	require.Equal(t, []Credit{{ID: 3, Unheard: time.Second}}, c, "spans do not overlap")
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
