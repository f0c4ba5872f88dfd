package adminrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/stretchr/testify/require"
)

// pair is a follower and a leader wired to each other by direct calls.
type pair struct {
	follower, leader *RPC
	// drop, when set, loses every payload the follower sends.
	drop atomic.Bool
	// sent counts the leader's replies.
	replies atomic.Int64
	rec     *logRecorder
}

// newPair wires two RPCs; serve is the leader's Serve. Both are closed
// when the test ends.
func newPair(t *testing.T, wait time.Duration, serve func(context.Context, Request) error) *pair {
	p := &pair{rec: &logRecorder{}}
	var ids atomic.Uint64
	p.leader = New(Config{
		Send: func(to string, b []byte) error {
			p.replies.Add(1)
			p.follower.OnMessage("leader", b)
			return nil
		},
		Leader: func() (string, bool) { return "leader", true },
		NewID:  func() uint64 { return ids.Add(1) },
		Serve:  serve,
		Wait:   wait,
		Logger: slog.New(p.rec),
	})
	p.follower = New(Config{
		Send: func(to string, b []byte) error {
			if to != "leader" {
				return fmt.Errorf("sent to %q", to)
			}
			if !p.drop.Load() {
				p.leader.OnMessage("follower", b)
			}
			return nil
		},
		Leader: func() (string, bool) { return "leader", true },
		NewID:  func() uint64 { return ids.Add(1) },
		Serve:  func(context.Context, Request) error { return ErrNotLeader },
		Wait:   wait,
		Logger: slog.New(p.rec),
	})
	t.Cleanup(func() {
		p.follower.Close()
		p.leader.Close()
	})
	return p
}

func TestAdminAskCarriesTheLeadersAnswer(t *testing.T) {
	var got []Request
	var mu sync.Mutex
	answer := error(nil)
	p := newPair(t, time.Minute, func(_ context.Context, req Request) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, req)
		return answer
	})
	ctx := context.Background()
	require.NoError(t, p.follower.Ask(ctx, Request{Op: OpPromote, Name: "n4"}))
	mu.Lock()
	require.Len(t, got, 1)
	require.Equal(t, "n4", got[0].Name)
	mu.Unlock()

	for _, sentinel := range []error{errs.NotCaughtUp, errs.UnknownMember, errs.NoQuorum, errs.Ambiguous, ErrNotLeader} {
		mu.Lock()
		answer = fmt.Errorf("%w: about n4", sentinel)
		mu.Unlock()
		err := p.follower.Ask(ctx, Request{Op: OpPromote, Name: "n4"})
		require.ErrorIs(t, err, sentinel)
		require.ErrorContains(t, err, "about n4", "the leader's message comes along")
	}
	// A leader that is closing sends the asker to look for the next one.
	mu.Lock()
	answer = fmt.Errorf("%w: stopping", errs.Closed)
	mu.Unlock()
	require.ErrorIs(t, p.follower.Ask(ctx, Request{Op: OpPromote, Name: "n4"}), ErrNotLeader)
	// An error with no sentinel still says what the leader said.
	mu.Lock()
	answer = errors.New("disk on fire")
	mu.Unlock()
	err := p.follower.Ask(ctx, Request{Op: OpPromote, Name: "n4"})
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "disk on fire")
	// An operation the leader does not know is refused, not ignored.
	err = p.follower.Ask(ctx, Request{Op: "demote", Name: "n4"})
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, `"demote" not supported`)
}

func TestAdminAskWithoutLeaderOrReply(t *testing.T) {
	p := newPair(t, 20*time.Millisecond, func(context.Context, Request) error { return nil })
	p.drop.Store(true)
	// A lost request looks like a leader that moved: look again.
	require.ErrorIs(t, p.follower.Ask(context.Background(), Request{Op: OpPromote, Name: "n4"}), ErrNotLeader)

	none := New(Config{
		Leader: func() (string, bool) { return "", false },
		NewID:  func() uint64 { return 1 },
	})
	defer none.Close()
	require.ErrorIs(t, none.Ask(context.Background(), Request{Op: OpPromote}), ErrNotLeader)
}

func TestAdminAskEndedByContextIsAmbiguous(t *testing.T) {
	p := newPair(t, time.Hour, func(context.Context, Request) error { return nil })
	p.drop.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.follower.Ask(ctx, Request{Op: OpPromote, Name: "n4"})
	require.ErrorIs(t, err, errs.Ambiguous)
	require.ErrorIs(t, err, context.Canceled)
}

// A reply counts only from the member that was asked: another member
// cannot settle a request it was never sent.
func TestAdminReplyFromAnotherMemberIsIgnored(t *testing.T) {
	p := newPair(t, time.Hour, func(context.Context, Request) error { return nil })
	p.drop.Store(true)
	done := make(chan error, 1)
	go func() { done <- p.follower.Ask(context.Background(), Request{Op: OpPromote, Name: "n4"}) }()
	// The follower's first request has ID 1 (the pair's IDs start at 1);
	// wait until it is registered.
	require.Eventually(t, func() bool {
		p.follower.mu.Lock()
		defer p.follower.mu.Unlock()
		_, ok := p.follower.waiting[1]
		return ok
	}, time.Minute, time.Millisecond)
	forged, err := Encode(&Message{Reply: &Reply{ID: 1}})
	require.NoError(t, err)
	p.follower.OnMessage("mallory", forged)
	genuine, err := Encode(&Message{Reply: &Reply{ID: 1, Code: "not-caught-up", Msg: "behind"}})
	require.NoError(t, err)
	p.follower.OnMessage("leader", genuine)
	require.ErrorIs(t, <-done, errs.NotCaughtUp)
}

func TestAdminServesAtMostMaxInFlight(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 100)
	p := newPair(t, time.Hour, func(ctx context.Context, req Request) error {
		started <- struct{}{}
		<-release
		return nil
	})
	req := func(id uint64) []byte {
		b, err := Encode(&Message{Req: &Request{ID: id, Op: OpPromote, Name: "n4"}})
		require.NoError(t, err)
		return b
	}
	for i := range maxInFlight {
		p.leader.OnMessage("follower", req(uint64(i+1)))
	}
	for range maxInFlight {
		<-started
	}
	// The leader is full: these are dropped (their askers ask again).
	for i := range 3 * maxInFlight {
		p.leader.OnMessage("follower", req(uint64(100+i)))
	}
	close(release)
	p.leader.Close()
	require.Equal(t, int64(maxInFlight), p.replies.Load())
	require.Len(t, started, 0)
}

func TestAdminCloseCancelsServingAndRefusesMore(t *testing.T) {
	cancelled := make(chan error, 1)
	serving := make(chan struct{})
	p := newPair(t, time.Hour, func(ctx context.Context, req Request) error {
		close(serving)
		<-ctx.Done()
		cancelled <- ctx.Err()
		return ctx.Err()
	})
	b, err := Encode(&Message{Req: &Request{ID: 1, Op: OpPromote, Name: "n4"}})
	require.NoError(t, err)
	p.leader.OnMessage("follower", b)
	<-serving
	p.leader.Close()
	require.ErrorIs(t, <-cancelled, context.Canceled)
	// Closed: requests are dropped and Ask refuses.
	p.leader.OnMessage("follower", b)
	require.ErrorIs(t, p.leader.Ask(context.Background(), Request{Op: OpPromote}), errs.Closed)
}

func TestAdminRefusedPayloadsAreLogged(t *testing.T) {
	p := newPair(t, time.Hour, func(context.Context, Request) error { return nil })
	good, err := Encode(&Message{Req: &Request{ID: 1, Op: OpPromote, Name: "n4"}})
	require.NoError(t, err)
	p.leader.OnMessage("follower", append([]byte{Version + 1}, good[1:]...))
	p.leader.OnMessage("follower", good[:3])
	p.leader.Close()
	require.Zero(t, p.replies.Load(), "nothing refused is served")
	log := p.rec.text()
	require.Contains(t, log, "dropped an admin message from=follower err=coord: unknown admin message version: version 2 (this member reads 1)")
	require.Contains(t, log, "malformed admin message")
}
