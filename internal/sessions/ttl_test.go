package sessions

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The leader's table answers for a loaded session (its grant from the
// election, then a keep-alive's), for an ended one (below the applied
// index) and defers one it has not applied yet.
func TestLeaderDeadline(t *testing.T) {
	cell := newFakeCell(Loaded{ID: 5, TTL: 10 * time.Second, Unheard: 4 * time.Second})
	l, clock := startLeader(t, cell)
	elected := clock.Now()

	d, st := l.Deadline(5)
	require.Equal(t, TTLAlive, st)
	require.Equal(t, elected.Add(6*time.Second), d, "TTL less unheard time from the election")

	clock.Add(time.Second)
	l.KeepAlive("m1", &KeepAlive{Seq: 1, IDs: []int64{5}})
	<-cell.acks
	d, _ = l.Deadline(5)
	require.Equal(t, elected.Add(11*time.Second), d, "a keep-alive grants TTL from its arrival")

	_, st = l.Deadline(6)
	require.Equal(t, TTLGone, st, "at or below the applied index (1000) and unknown: ended")
	_, st = l.Deadline(0)
	require.Equal(t, TTLGone, st)
	_, st = l.Deadline(1001)
	require.Equal(t, TTLRetry, st, "perhaps created but not applied here yet")

	l.Stop()
	_, st = l.Deadline(5)
	require.Equal(t, TTLRetry, st, "a stopped term answers nothing")
}

func TestTTLWire(t *testing.T) {
	for _, m := range []*TTLMessage{
		{Query: &TTLQuery{Seq: 3, ID: 42}},
		{Answer: &TTLAnswer{Seq: 3, Status: TTLAlive, Left: 1500 * time.Millisecond}},
		{Answer: &TTLAnswer{Seq: 4, Status: TTLGone}},
	} {
		b, err := EncodeTTL(m)
		require.NoError(t, err)
		require.True(t, IsTTL(b))
		got, err := DecodeTTL(b)
		require.NoError(t, err)
		require.Equal(t, m, got)
		_, err = Decode(b)
		require.ErrorIs(t, err, ErrMalformed, "not a keep-alive message")
	}
	ka, err := Encode(&Message{KeepAlive: &KeepAlive{Seq: 1}})
	require.NoError(t, err)
	require.False(t, IsTTL(ka))

	bad := func(m *TTLMessage) []byte {
		b, err := EncodeTTL(m)
		require.NoError(t, err)
		return b
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"version only":   {ttlWire},
		"garbage":        {ttlWire, 0xc1, 0xff},
		"neither":        bad(&TTLMessage{}),
		"both":           bad(&TTLMessage{Query: &TTLQuery{}, Answer: &TTLAnswer{}}),
		"unknown status": bad(&TTLMessage{Answer: &TTLAnswer{Status: 9}}),
		"negative left":  bad(&TTLMessage{Answer: &TTLAnswer{Status: TTLAlive, Left: -1}}),
	} {
		_, err := DecodeTTL(b)
		require.ErrorIs(t, err, ErrMalformed, name)
	}
}

func FuzzDecodeTTL(f *testing.F) {
	b, _ := EncodeTTL(&TTLMessage{Query: &TTLQuery{Seq: 1, ID: 2}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = DecodeTTL(b) })
}
