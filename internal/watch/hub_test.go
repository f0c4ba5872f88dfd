package watch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/testmain"
	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// fakeHistory is a durable history of revisions 1..n, each changing the
// keys given for it, retaining revisions >= oldest.
type fakeHistory struct {
	mu     sync.Mutex
	revs   []storage.Revision
	oldest int64
	reads  int
}

func (f *fakeHistory) add(keys ...string) storage.Revision {
	f.mu.Lock()
	defer f.mu.Unlock()
	rev := int64(len(f.revs) + 1)
	r := storage.Revision{Rev: rev}
	for _, k := range keys {
		r.Events = append(r.Events, storage.Event{Type: storage.EventPut, KV: command.KV{Key: k, ModRev: rev}})
	}
	f.revs = append(f.revs, r)
	return r
}

func (f *fakeHistory) History(from int64, limit int) ([]storage.Revision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if from+1 < f.oldest {
		return nil, fmt.Errorf("%w: oldest %d", storage.ErrCompacted, f.oldest)
	}
	var out []storage.Revision
	for _, r := range f.revs {
		if r.Rev > from && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeHistory) OldestRevision() int64 { return f.oldest }

func (f *fakeHistory) Revision() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.revs))
}

func (f *fakeHistory) storageReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// got is one delivery to a recorder.
type got struct {
	rev      int64
	key      string
	end      bool
	progress bool
}

// recorder is an Emitter that sends what it gets on a channel.
type recorder struct{ ch chan got }

func newRecorder() *recorder { return &recorder{ch: make(chan got, 1024)} }

func (r *recorder) Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error {
	r.ch <- got{rev: rev, key: ev.KV.Key, end: end}
	return nil
}

func (r *recorder) Progress(ctx context.Context, rev int64) error {
	r.ch <- got{rev: rev, progress: true}
	return nil
}

func (r *recorder) next(t *testing.T) got {
	t.Helper()
	select {
	case g := <-r.ch:
		return g
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered")
		return got{}
	}
}

// start runs a watch until the test ends.
func start(t *testing.T, h *Hub, prefix string, from int64, every time.Duration, progressNow chan struct{}) *recorder {
	t.Helper()
	r := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Watch(ctx, prefix, from, every, r, progressNow) }()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	return r
}

func TestWatchReadsHistoryThenLive(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	for i := range 10 {
		f.add(fmt.Sprintf("k%d", i))
	}
	h := NewHub(f, 4)
	r := start(t, h, "k", 2, 0, nil)
	for want := int64(3); want <= 10; want++ {
		require.Equal(t, want, r.next(t).rev)
	}
	for range 4 {
		h.Publish([]storage.Revision{f.add("k")})
	}
	for want := int64(11); want <= 14; want++ {
		require.Equal(t, want, r.next(t).rev, "every revision after the start, once, in order")
	}
}

func TestOnlyMatchingGroupsAreWokenAndStorageIsNotRead(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 100)
	a := start(t, h, "a/", 0, 0, nil)
	b := start(t, h, "b/", 0, 0, nil)
	// Let both watches reach their wait.
	require.Eventually(t, func() bool { h.mu.RLock(); defer h.mu.RUnlock(); return len(h.groups) == 2 }, time.Second, time.Millisecond)
	readsBefore := f.storageReads()
	h.Publish([]storage.Revision{f.add("a/1"), f.add("a/2", "b/1", "a/3")})
	require.Equal(t, got{rev: 1, key: "a/1", end: true}, a.next(t))
	require.Equal(t, got{rev: 2, key: "a/2"}, a.next(t))
	require.Equal(t, got{rev: 2, key: "a/3", end: true}, a.next(t), "a revision's events come together, the last one marked")
	require.Equal(t, got{rev: 2, key: "b/1", end: true}, b.next(t))
	require.Equal(t, readsBefore, f.storageReads(), "watchers that keep up are served from memory")
}

func TestManyWatchersOfOnePrefixShareOneGroup(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 100)
	var rs []*recorder
	for range 100 {
		rs = append(rs, start(t, h, "hot", 0, 0, nil))
	}
	require.Eventually(t, func() bool {
		h.mu.RLock()
		defer h.mu.RUnlock()
		g := h.groups["hot"]
		return len(h.groups) == 1 && g != nil && g.refs == 100
	}, time.Second, time.Millisecond)
	h.Publish([]storage.Revision{f.add("hot")})
	for _, r := range rs {
		require.Equal(t, int64(1), r.next(t).rev)
	}
	h.mu.RLock()
	require.Equal(t, 1, h.groups["hot"].win.len(), "one copy of the event for all its watchers")
	h.mu.RUnlock()
}

func TestWindowOverflowFallsBackToStorage(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 3)
	r := start(t, h, "k", 0, 0, nil)
	require.Eventually(t, func() bool { h.mu.RLock(); defer h.mu.RUnlock(); return len(h.groups) == 1 }, time.Second, time.Millisecond)
	var revs []storage.Revision
	for range 10 {
		revs = append(revs, f.add("k"))
	}
	h.Publish(revs)
	for want := int64(1); want <= 10; want++ {
		require.Equal(t, want, r.next(t).rev)
	}
}

func TestWatchBelowRetainedHistory(t *testing.T) {
	f := &fakeHistory{oldest: 5}
	for range 10 {
		f.add("k")
	}
	h := NewHub(f, 2)
	err := h.Watch(context.Background(), "k", 1, 0, newRecorder(), nil)
	var ce *CompactedError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, int64(5), ce.Oldest)
	require.ErrorIs(t, err, errs.Compacted)
}

func TestProgressReportsTheRevisionTheWatchIsCurrentTo(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 10)
	ask := make(chan struct{}, 1)
	r := start(t, h, "quiet/", 0, 0, ask)
	h.Publish([]storage.Revision{f.add("other"), f.add("other")})
	ask <- struct{}{}
	g := r.next(t)
	require.True(t, g.progress)
	require.Equal(t, int64(2), g.rev, "changes elsewhere advance the watch's revision")

	timed := start(t, h, "quiet/", 2, 20*time.Millisecond, nil)
	g = timed.next(t)
	require.True(t, g.progress)
	require.Equal(t, int64(2), g.rev)
}

func TestResetAfterSnapshotReadsStorage(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 10)
	r := start(t, h, "k", 0, 0, nil)
	require.Eventually(t, func() bool { h.mu.RLock(); defer h.mu.RUnlock(); return len(h.groups) == 1 }, time.Second, time.Millisecond)
	f.add("k")
	f.add("k") // applied by a snapshot: never published
	h.Reset(2)
	require.Equal(t, int64(1), r.next(t).rev)
	require.Equal(t, int64(2), r.next(t).rev)
	h.Publish([]storage.Revision{f.add("k")})
	require.Equal(t, int64(3), r.next(t).rev)
}

// A watch that starts a little behind the head, on a prefix nobody
// watched (a lock waiter watching the key it has just created), is served
// from the hub's recent revisions, not from storage; one that starts
// before them reads storage, and a window is still exactly-once.
func TestNewWatchJustBehindTheHeadIsServedFromMemory(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 100)
	for i := range recentRevisions + 10 {
		h.Publish([]storage.Revision{f.add(fmt.Sprintf("other/%d", i), fmt.Sprintf("lock/%d", i%3))})
	}
	head := h.Head()
	readsBefore := f.storageReads()
	r := start(t, h, "lock/1", head-5, 0, nil)
	var revs []int64
	for range 2 { // lock/1 changed at 2 of the last 5 revisions
		g := r.next(t)
		require.Equal(t, "lock/1", g.key)
		require.True(t, g.end)
		revs = append(revs, g.rev)
	}
	require.Equal(t, []int64{head - 3, head}, revs)
	require.Equal(t, readsBefore, f.storageReads(), "served from the recent revisions")

	old := start(t, h, "lock/2", 0, 0, nil)
	for want := int64(3); want <= head; want += 3 {
		require.Equal(t, want, old.next(t).rev, "from before the recent revisions: from storage, then memory, no gap, no repeat")
	}
	require.Greater(t, f.storageReads(), readsBefore)
	h.Publish([]storage.Revision{f.add("lock/2")})
	require.Equal(t, head+1, old.next(t).rev)
}

// Big values bound the recent revisions by bytes, not only by count.
func TestRecentRevisionsBoundedByBytes(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 100)
	for range 64 {
		r := f.add("big")
		r.Events[0].KV.Value = make([]byte, 64<<10)
		h.Publish([]storage.Revision{r})
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	require.LessOrEqual(t, h.recent.bytes, recentMaxBytes)
	require.Less(t, h.recent.len(), 64)
	require.Equal(t, h.head, h.recent.at(h.recent.len()-1).Rev, "the recent revisions end at the head")
}
