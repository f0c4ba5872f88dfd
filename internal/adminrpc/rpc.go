package adminrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/errs"
)

// ErrNotLeader: the member asked does not lead (or the request or its
// reply was lost, which to the asker looks the same): find the leader and
// ask again. The root package never returns it to users.
var ErrNotLeader = errors.New("coord: this member does not lead")

// ErrRefused: the leader refused the request for a reason this member has
// no sentinel for (an operation it does not support, a fault of its own);
// the error carries the leader's message.
var ErrRefused = errors.New("coord: the leader refused the request")

// codes are the errors a reply can carry, by code. Serve's error gets the
// first code whose sentinel it wraps, so the order matters: an outcome
// that may have happened is reported as such before anything else.
var codes = []struct {
	code string
	err  error
}{
	{"ambiguous", errs.Ambiguous},
	{"not-leader", ErrNotLeader},
	{"not-caught-up", errs.NotCaughtUp},
	{"unknown-member", errs.UnknownMember},
	{"no-quorum", errs.NoQuorum},
	// A leader that is closing cannot serve: the asker looks for the
	// next one (a promote asked twice is harmless).
	{"not-leader", errs.Closed},
}

// codeOf returns the code of err for a reply.
func codeOf(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "other"
}

// errorOf returns the error the asker returns for a reply.
func errorOf(r Reply) error {
	if r.Code == "" {
		return nil
	}
	for _, c := range codes {
		if c.code == r.Code {
			return fmt.Errorf("%w (from the leader: %s)", c.err, r.Msg)
		}
	}
	return fmt.Errorf("%w: %s", ErrRefused, r.Msg)
}

// maxInFlight bounds the requests a leader serves at once. Only members
// can send them, and a member asks one at a time per caller, so a few
// suffice; the rest are dropped and their askers ask again.
const maxInFlight = 4

// Config wires an RPC to its member. Every function is required.
type Config struct {
	// Send sends an admin payload to the member named to. It must not
	// block (it runs on the raft loop when replying is quick).
	Send func(to string, payload []byte) error
	// Leader names the leader as this member last heard of it; false
	// when it knows of none.
	Leader func() (string, bool)
	// NewID returns an ID unique among this member's requests.
	NewID func() uint64
	// Serve carries out a request on the leader. It returns an error
	// wrapping ErrNotLeader when this member does not lead.
	Serve func(ctx context.Context, req Request) error
	// Wait bounds both how long an asker waits for a reply and how long
	// the leader spends serving one request.
	Wait time.Duration
	// Logger hears of refused payloads; nil discards.
	Logger *slog.Logger
}

// RPC is one member's end of the admin RPC: it asks, and, while this
// member leads, serves. It is safe for concurrent use.
type RPC struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	waiting map[uint64]waiter
	closed  bool
	// slots holds a token per request being served: a flood of requests
	// costs at most maxInFlight goroutines.
	slots chan struct{}
	wg    sync.WaitGroup
	// life ends at Close, cancelling the requests being served.
	life    context.Context
	endLife context.CancelFunc
}

// waiter is an Ask waiting for its reply from the member it asked.
type waiter struct {
	leader string
	ch     chan Reply
}

// New returns an RPC wired by cfg.
func New(cfg Config) *RPC {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &RPC{cfg: cfg, log: log, waiting: make(map[uint64]waiter), slots: make(chan struct{}, maxInFlight)}
	r.life, r.endLife = context.WithCancel(context.Background())
	return r
}

// Close cancels the requests being served and waits for them to end.
// Later requests are dropped and later Asks fail with errs.Closed.
func (r *RPC) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.endLife()
	r.wg.Wait()
}

// Ask sends req to the leader and waits for its reply. It returns an
// error wrapping ErrNotLeader when there is no leader to ask, or no reply
// came within Config.Wait (the leader may have moved): the caller looks
// again. When ctx ends first the outcome is unknown: errs.Ambiguous.
func (r *RPC) Ask(ctx context.Context, req Request) error {
	leader, ok := r.cfg.Leader()
	if !ok {
		return ErrNotLeader
	}
	req.ID = r.cfg.NewID()
	ch := make(chan Reply, 1)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return errs.Closed
	}
	r.waiting[req.ID] = waiter{leader: leader, ch: ch}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, req.ID)
		r.mu.Unlock()
	}()
	data, err := Encode(&Message{Req: &req})
	if err != nil {
		return err
	}
	if err := r.cfg.Send(leader, data); err != nil {
		return err
	}
	wait := time.NewTimer(r.cfg.Wait)
	defer wait.Stop()
	select {
	case rep := <-ch:
		return errorOf(rep)
	case <-wait.C:
		return fmt.Errorf("%w: no reply from %q", ErrNotLeader, leader)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errs.Ambiguous, ctx.Err())
	}
}

// OnMessage takes one admin payload from member from. It runs on the raft
// loop and does not block: a request is served on a goroutine of its own,
// or dropped when maxInFlight are being served (its asker asks again).
func (r *RPC) OnMessage(from string, data []byte) {
	m, err := Decode(data)
	if err != nil {
		r.log.Warn("dropped an admin message", "from", from, "err", err)
		return
	}
	if m.Reply != nil {
		r.mu.Lock()
		w, ok := r.waiting[m.Reply.ID]
		r.mu.Unlock()
		// Only the member asked may answer: another member could
		// otherwise settle a request it was never sent.
		if !ok || w.leader != from {
			return
		}
		select {
		case w.ch <- *m.Reply:
		default:
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	select {
	case r.slots <- struct{}{}:
	default:
		return
	}
	// Added under mu, which Close takes before it waits: no Add can
	// follow the Wait.
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() { <-r.slots }()
		r.serve(from, *m.Req)
	}()
}

// serve carries out one request from member from and replies.
func (r *RPC) serve(from string, req Request) {
	ctx, cancel := context.WithTimeout(r.life, r.cfg.Wait)
	defer cancel()
	reply := Reply{ID: req.ID}
	var err error
	switch req.Op {
	case OpPromote, OpMoveLeader:
		err = r.cfg.Serve(ctx, req)
	default:
		err = fmt.Errorf("operation %q not supported by this member", req.Op)
	}
	if err != nil {
		reply.Code, reply.Msg = codeOf(err), err.Error()
	}
	data, err := Encode(&Message{Reply: &reply})
	if err != nil {
		r.log.Warn("cannot encode an admin reply", "to", from, "err", err)
		return
	}
	_ = r.cfg.Send(from, data) // lost, the asker times out and asks again
}
