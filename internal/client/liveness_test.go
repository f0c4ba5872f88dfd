package client

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/spi"
)

// logSeen is a slog.Handler that signals each message it is given on a
// channel of its own.
type logSeen struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
}

func newLogSeen(msgs ...string) *logSeen {
	l := &logSeen{seen: map[string]chan struct{}{}}
	for _, m := range msgs {
		l.seen[m] = make(chan struct{})
	}
	return l
}

func (l *logSeen) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSeen) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logSeen) WithGroup(string) slog.Handler            { return l }
func (l *logSeen) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for m, ch := range l.seen {
		if strings.HasPrefix(r.Message, m) {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}
	return nil
}

func (l *logSeen) wait(t *testing.T, msg string, within time.Duration) {
	t.Helper()
	select {
	case <-l.seen[msg]:
	case <-time.After(within):
		t.Fatalf("no log %q within %v", msg, within)
	}
}

const (
	logStaying = "member slow to answer a ping, but sending; staying"
	logLeaving = "member stopped answering pings; moving on"
)

// busyMember is a fake member whose reads hang until release is closed
// and whose in-flight limit is 2: two reads of the client's keep its
// pings waiting for a place, as a member busy with a thousand requests
// of one client would.
func busyMember(release chan struct{}, log *logSeen) *fakeMember {
	return &fakeMember{
		lim:    clientwire.Limits{MaxInFlight: 2},
		logger: slog.New(log),
		read: func(_ int32, ctx context.Context, _ *clientwire.Read) (*clientwire.ReadResult, error) {
			select {
			case <-release:
				return &clientwire.ReadResult{Rev: 1}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

// hang starts two reads that the busy member holds.
func hang(c *Client, wg *sync.WaitGroup, ctx context.Context) {
	for range 2 {
		wg.Go(func() { _, _ = c.read(ctx, &clientwire.Read{Key: "k"}) })
	}
}

// A member whose pings wait behind the client's own requests but which
// keeps sending (here a watch's progress reports) is busy, not gone: the
// client stays on it. Moving would bring the same load to the next
// member, each watch resumed there and each session's keep-alive with
// it, which is how sessions were lost beside 100,000 watches.
func TestClientStaysOnABusyMemberThatKeepsSending(t *testing.T) {
	release := make(chan struct{})
	log := newLogSeen(logStaying, logLeaving)
	f := busyMember(release, log)
	f.watch = func(ctx context.Context, w *clientwire.WatchStart, sink *clientwire.WatchSink) error {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for rev := w.FromRev; ; rev++ {
			select {
			case <-tick.C:
				if err := sink.Progress(rev); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	c := serveFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wctx, wcancel := context.WithCancel(ctx)
	sink := spi.NewStream(8, wcancel, func(e spi.Event) spi.Event { return e })
	c.Watch(wctx, "w/", spi.WatchOptions{Puts: true, Dels: true, FromRev: 1, FromSet: true}, sink)
	<-sink.Ready()
	var wg sync.WaitGroup
	hang(c, &wg, ctx)

	log.wait(t, logStaying, 10*time.Second)
	if n := f.welcomes.Load(); n != 1 {
		t.Fatalf("the client connected %d times, want once: it left a member that kept sending", n)
	}
	select {
	case <-log.seen[logLeaving]:
		t.Fatal("the client left a member that kept sending")
	default:
	}
	close(release)
	wg.Wait()
	sink.Close()
	for range sink.Events() {
	}
}

// The same member, silent: the client's pings go unanswered for two
// election timeouts with nothing else from it, and the client moves on.
func TestClientLeavesAMemberSilentForAPing(t *testing.T) {
	release := make(chan struct{})
	log := newLogSeen(logStaying, logLeaving)
	f := busyMember(release, log)
	c := serveFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	hang(c, &wg, ctx)

	log.wait(t, logLeaving, 10*time.Second)
	close(release)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for f.welcomes.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the client did not connect again after leaving (%d welcomes)", f.welcomes.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
