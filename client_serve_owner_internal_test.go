package coord

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueueEntrySession: the member reads a queue entry's session from
// its name exactly as the recipes write it (queue.newKey), and takes no
// other key for an entry.
func TestQueueEntrySession(t *testing.T) {
	s := &Session{id: 0x1234abcd}
	for _, q := range []*queue{newLockQueue(s, "jobs"), newLockQueue(s, "a/b"), newQueue(s, electionPrefix("sched"), false),
		newQueue(s, electionPrefix("x/y"), false)} {
		for _, kind := range []byte{kindMutex, kindWriter, kindReader, kindSlot} {
			key := q.newKey(kind)
			id, marker, ok := queueEntrySession(key)
			require.True(t, ok, key)
			require.False(t, marker, key)
			require.EqualValues(t, 0x1234abcd, id, key)
		}
	}
	hex32 := "0000000000000007000000000000abcd"
	id, marker, ok := queueEntrySession("locks/jobs/d" + hex32)
	require.True(t, ok)
	require.True(t, marker)
	require.EqualValues(t, 7, id)
	for _, key := range []string{
		"", "locks/", "locks/jobs/", "locks//m" + hex32, "locks/m" + hex32, "locks/jobs/x" + hex32,
		"locks/jobs/m" + strings.ToUpper(hex32), "locks/jobs/m" + hex32[1:], "locks/jobs/m" + hex32 + "0",
		"locks/jobs-m" + hex32, "elections//" + hex32, "elections/" + hex32, "elections/g/m" + hex32,
		"elections/g/" + hex32[:31] + "g", "app/locks/jobs/m" + hex32, "lock/jobs/m" + hex32,
	} {
		_, _, ok := queueEntrySession(key)
		require.False(t, ok, key)
	}
}
