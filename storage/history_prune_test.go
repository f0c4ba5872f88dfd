package storage

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// historyRevs returns the revisions whose records are on disk.
func historyRevs(t testing.TB, ts *testSM) []int64 {
	t.Helper()
	it, err := ts.image().NewIter(nil)
	require.NoError(t, err)
	defer it.Close()
	var revs []int64
	for it.SeekGE([]byte{prefixHistory}); it.Valid() && it.Key()[0] == prefixHistory; it.Next() {
		revs = append(revs, int64(readUint64(it.Key()[1:])))
	}
	require.NoError(t, it.Error())
	return revs
}

// The window History promises moves with every revision, exactly, while
// the records below it go a chunk at a time, at chunk boundaries that do
// not depend on how the entries were batched.
func TestHistoryPruneChunks(t *testing.T) {
	t.Parallel()
	const window = 5
	chunk := historyChunk(window)
	require.EqualValues(t, minHistoryChunk, chunk)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	one := openTestSM(t, nil, Options{HistoryRevisions: window})
	many := openTestSM(t, nil, Options{HistoryRevisions: window})
	put := func(i int) *command.Command {
		return txnCmd(command.Txn{Then: []command.Op{putOp(fmt.Sprintf("k%d", i%7), "v")}})
	}
	total := int(2*chunk + chunk/2)
	for i := 0; i < total; {
		n := min(1+rng.IntN(60), total-i)
		var cmds []*command.Command
		for j := range n {
			cmds = append(cmds, put(i+j))
			one.apply(put(i + j))
		}
		many.apply(cmds...)
		i += n

		rev := many.Revision()
		oldest := max(1, rev-window+1)
		require.Equal(t, oldest, many.OldestRevision())
		// The window is exact: from oldest-1 it is served, below it is not.
		hist, err := many.History(oldest-1, 0)
		require.NoError(t, err)
		require.Len(t, hist, int(rev-oldest+1))
		require.Equal(t, oldest, hist[0].Rev)
		if oldest > 1 {
			_, err = many.History(oldest-2, 0)
			require.ErrorIs(t, err, ErrCompacted)
			require.ErrorContains(t, err, fmt.Sprintf("oldest retained revision is %d", oldest))
		}
		// On disk: everything from the last chunk boundary at or below
		// the window's start.
		from := max(1, oldest/chunk*chunk)
		revs := historyRevs(t, many)
		require.Equal(t, from, revs[0], "revision %d", rev)
		require.Equal(t, rev, revs[len(revs)-1])
		require.Len(t, revs, int(rev-from+1))
		// Batching makes no difference to what is stored.
		require.Equal(t, one.dump(), many.dump(), "revision %d", rev)
	}
	// A reopen keeps the window and the records.
	before := many.dump()
	many.reopen()
	require.Equal(t, before, many.dump())
	require.Equal(t, many.Revision()-window+1, many.OldestRevision())
}

// A window that changes between runs (HistoryRevisions reconfigured) still
// prunes every record below its chunk boundary, including those the old
// chunk size left behind.
func TestHistoryPruneWindowChange(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{HistoryRevisions: 16 << 10})
	for i := range 3000 {
		ts.put(fmt.Sprintf("k%d", i%5), "v")
	}
	require.EqualValues(t, 1, historyRevs(t, ts)[0])
	ts.opts.HistoryRevisions = 10
	ts.reopen()
	for i := range int(minHistoryChunk) {
		ts.put(fmt.Sprintf("k%d", i%5), "v")
	}
	rev := ts.Revision()
	oldest := rev - 10 + 1
	require.Equal(t, oldest, ts.OldestRevision())
	require.Equal(t, oldest/minHistoryChunk*minHistoryChunk, historyRevs(t, ts)[0])
}
