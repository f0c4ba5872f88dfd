package watch

import (
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
)

// The recent revisions are a ring: oldest first across the wrap, within
// both bounds, and forgetting a revision clears its slot.
func TestRecentRingKeepsTheNewestInOrder(t *testing.T) {
	var q recentRing
	for rev := int64(1); rev <= 3*recentRevisions+7; rev++ {
		q.push(storage.Revision{Rev: rev, Events: []storage.Event{{KV: command.KV{Key: "k", Value: []byte("v")}}}})
		require.Equal(t, min(rev, recentRevisions), int64(q.len()))
		require.Equal(t, rev, q.at(q.len()-1).Rev, "the newest is last")
		require.Equal(t, rev-int64(q.len())+1, q.at(0).Rev, "no gap from the oldest to the newest")
	}
	require.Equal(t, recentRevisions*2, q.bytes)
	for i := range q.len() - 1 {
		require.Equal(t, q.at(i).Rev+1, q.at(i+1).Rev)
	}

	big := make([]byte, recentMaxBytes/3)
	for rev := int64(1000); rev < 1010; rev++ {
		q.push(storage.Revision{Rev: rev, Events: []storage.Event{{KV: command.KV{Key: "b", Value: big}}}})
		require.LessOrEqual(t, q.bytes, recentMaxBytes)
		require.Equal(t, rev, q.at(q.len()-1).Rev)
	}
	require.Equal(t, 2, q.len(), "two thirds of the byte bound, with the small revisions' bytes gone too")
	pinned := 0
	for _, r := range q.buf {
		if r.Events != nil {
			pinned++
		}
	}
	require.Equal(t, q.len(), pinned, "forgotten revisions' slots pin nothing")

	q.reset()
	require.Zero(t, q.len())
	require.Zero(t, q.bytes)
	q.push(storage.Revision{Rev: 5})
	require.Equal(t, int64(5), q.at(0).Rev)
}
