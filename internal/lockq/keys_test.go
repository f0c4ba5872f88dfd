package lockq

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseKey: a key is read as an entry exactly as the recipes write it
// (EntryKey), in its own queue and no other, and no other key is taken
// for an entry.
func TestParseKey(t *testing.T) {
	for _, q := range []struct {
		prefix string
		kinded bool
	}{{LockPrefix("jobs"), true}, {LockPrefix("a/b"), true}, {ElectionPrefix("sched"), false}, {ElectionPrefix("x/y"), false}} {
		for _, kind := range []byte{KindMutex, KindWriter, KindReader, KindSlot} {
			key := EntryKey(q.prefix, q.kinded, kind, 0x1234abcd, 7)
			e, ok := ParseKey(key)
			require.True(t, ok, key)
			require.NotEqual(t, byte(KindDelay), e.Kind, key)
			require.EqualValues(t, 0x1234abcd, e.Session, key)
			require.Equal(t, q.prefix, e.Prefix, key)
			require.Equal(t, !q.kinded, e.Election(), key)
			got, ok := InQueue(q.prefix, q.kinded, key)
			require.True(t, ok, key)
			if q.kinded {
				require.Equal(t, kind, got)
			}
			_, ok = InQueue(q.prefix+"z/", q.kinded, key)
			require.False(t, ok, key)
		}
	}
	hex32 := "0000000000000007000000000000abcd"
	e, ok := ParseKey("locks/jobs/d" + hex32)
	require.True(t, ok)
	require.Equal(t, byte(KindDelay), e.Kind)
	require.EqualValues(t, 7, e.Session)
	require.True(t, IsDelayMarker("locks/jobs/d"+hex32))
	require.Equal(t, "locks/jobs/d"+hex32, mustParse(t, "locks/jobs/m"+hex32).Marker())
	for _, key := range []string{
		"", "locks/", "locks/jobs/", "locks//m" + hex32, "locks/m" + hex32, "locks/jobs/x" + hex32,
		"locks/jobs/m" + strings.ToUpper(hex32), "locks/jobs/m" + hex32[1:], "locks/jobs/m" + hex32 + "0",
		"locks/jobs-m" + hex32, "elections//" + hex32, "elections/" + hex32, "elections/g/m" + hex32,
		"elections/g/" + hex32[:31] + "g", "app/locks/jobs/m" + hex32, "lock/jobs/m" + hex32,
	} {
		_, ok := ParseKey(key)
		require.False(t, ok, key)
		require.False(t, IsDelayMarker(key), key)
	}
	require.Equal(t, fmt.Sprintf("locks/j/m%016x%016x", uint64(1<<63), uint64(2)), EntryKey("locks/j/", true, KindMutex, -1<<63, 2))
}

func mustParse(t *testing.T, key string) Entry {
	e, ok := ParseKey(key)
	require.True(t, ok, key)
	return e
}

func TestDelayValue(t *testing.T) {
	for _, d := range []time.Duration{1, time.Second, MaxLockDelay} {
		got, ok := ParseDelay(DelayValue(d))
		require.True(t, ok, d)
		require.Equal(t, d, got)
		require.Equal(t, d, MarkerDelay(DelayValue(d)))
	}
	for _, v := range []string{"", "3", "lock-delay:", "lock-delay:0", "lock-delay:-5", "lock-delay:01",
		"lock-delay:1x", "lock-delay:99999999999999999999", string(DelayValue(MaxLockDelay + 1))} {
		_, ok := ParseDelay([]byte(v))
		require.False(t, ok, v)
		require.Equal(t, MaxLockDelay, MarkerDelay([]byte(v)))
	}
}

func TestQueueName(t *testing.T) {
	for key, want := range map[string]string{"locks/a/b/m00": "a/b", "elections/g/x": "g", "locks/x": "", "elections//x": "", "other/a/b": ""} {
		name, _, ok := QueueName(key)
		require.Equal(t, want != "", ok, key)
		require.Equal(t, want, name, key)
	}
}
