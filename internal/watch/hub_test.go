package watch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/storage"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeHistory is a durable history of revisions 1..n with keys k<rev>,
// retaining revisions >= oldest.
type fakeHistory struct {
	mu     sync.Mutex
	revs   []storage.Revision
	oldest int64
	reads  int
}

func (f *fakeHistory) append(n int) []storage.Revision {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []storage.Revision
	for range n {
		rev := int64(len(f.revs) + 1)
		r := storage.Revision{Rev: rev, Events: []storage.Event{{Type: storage.EventPut,
			KV: command.KV{Key: fmt.Sprintf("k%d", rev), ModRev: rev}}}}
		f.revs = append(f.revs, r)
		out = append(out, r)
	}
	return out
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

func (f *fakeHistory) Revision() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.revs))
}

func collect(t *testing.T, h *Hub, from int64, want int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []int64
	err := h.Watch(ctx, "k", from, func(rev int64, ev storage.Event) bool {
		got = append(got, rev)
		if len(got) == want {
			cancel()
		}
		return true
	})
	require.ErrorIs(t, err, context.Canceled)
	return got
}

func TestWatchReadsHistoryThenLive(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 4)
	h.Publish(f.append(10)) // the window keeps 7..10
	done := make(chan []int64)
	go func() { done <- collect(t, h, 2, 12) }()
	h.Publish(f.append(4))
	got := <-done
	want := []int64{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	require.Equal(t, want, got, "every revision after the start, once, in order")
}

func TestWatchFromTheWindowDoesNotReadStorage(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 100)
	h.Publish(f.append(50))
	f.reads = 0
	require.Len(t, collect(t, h, 20, 30), 30)
	require.Zero(t, f.reads)
}

func TestWatchBelowRetainedHistory(t *testing.T) {
	f := &fakeHistory{oldest: 5}
	f.append(10)
	h := NewHub(f, 2)
	err := h.Watch(context.Background(), "k", 1, func(int64, storage.Event) bool { return true })
	require.ErrorContains(t, err, "compacted")
}

func TestPublishGapResetsWindow(t *testing.T) {
	f := &fakeHistory{oldest: 1}
	h := NewHub(f, 100)
	revs := f.append(6)
	h.Publish(revs[:2])
	h.Publish(revs[4:]) // 3 and 4 never published (a snapshot jumped over them)
	require.Equal(t, []int64{3, 4, 5, 6}, collect(t, h, 2, 4), "the gap is read from storage")
}
