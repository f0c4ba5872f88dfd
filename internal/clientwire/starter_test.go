package clientwire

import (
	"context"
	"testing"
	"time"
)

// starterFake serves watches the WatchStarter way: StartWatch returns at
// once, and each watch ends only when its sink's OnStop hook runs.
type starterFake struct {
	*fakeHandler
	started chan *WatchSink
	stopped chan uint64
}

func (f *starterFake) StartWatch(_ context.Context, _ string, _ *WatchStart, sink *WatchSink, done func(error)) {
	f.started <- sink
	sink.OnStop(func() {
		f.stopped <- sink.ID()
		done(nil)
	})
}

func waitID(t *testing.T, ch <-chan uint64, what string) uint64 {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s", what)
		return 0
	}
}

// A watch served without a goroutine ends when the client cancels it and
// when its connection ends, each told to the Handler once through OnStop,
// and the client hears the end.
func TestWatchStarterStoppedByCancelAndByTheConnectionsEnd(t *testing.T) {
	f := &starterFake{fakeHandler: newFake(), started: make(chan *WatchSink, 4), stopped: make(chan uint64, 4)}
	c, _ := dial(t, f, "alice", Limits{}, ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w1, _, err := chanWatch(ctx, c, &WatchStart{Prefix: "a/"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	s1 := <-f.started
	w1.Cancel()
	if id := waitID(t, f.stopped, "stop after the client's cancel"); id != s1.ID() {
		t.Fatalf("stopped watch %d, want %d", id, s1.ID())
	}
	s1.OnStop(func() { f.stopped <- 99 }) // registered after the stop: runs at once
	if id := waitID(t, f.stopped, "late hook"); id != 99 {
		t.Fatalf("late hook: %d", id)
	}

	w2, _, err := chanWatch(ctx, c, &WatchStart{Prefix: "b/"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	s2 := <-f.started
	_ = c.Close()
	if id := waitID(t, f.stopped, "stop at the connection's end"); id != s2.ID() {
		t.Fatalf("stopped watch %d, want %d", id, s2.ID())
	}
	select {
	case <-w2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the client's watch did not end with its connection")
	}
	select {
	case id := <-f.stopped:
		t.Fatalf("watch %d stopped twice", id)
	default:
	}
}
