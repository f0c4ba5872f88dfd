package raftnode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage"
)

// proposal is one caller's command on its way through Raft.
type proposal struct {
	id   uint64
	data []byte
	resc chan proposalResult // buffered 1; written once, by whoever removes the waiter
	// handed is set once the raft loop gave the command to Raft: from then
	// on its outcome is unknown until it applies (ErrAmbiguous), before
	// then it certainly did not happen.
	handed atomic.Bool
}

type proposalResult struct {
	res command.Result
	err error
}

// waiters maps command IDs to the proposals waiting for them to apply.
type waiters struct {
	mu   sync.Mutex
	m    map[uint64]*proposal
	next atomic.Uint64
}

func (w *waiters) init() {
	w.m = make(map[uint64]*proposal)
	// A random start keeps IDs from one incarnation (or one member)
	// from matching another's waiters when old log entries replay.
	w.next.Store(rand.Uint64())
}

func (w *waiters) newID() uint64 {
	for {
		if id := w.next.Add(1); id != 0 {
			return id
		}
	}
}

func (w *waiters) add(p *proposal) {
	w.mu.Lock()
	w.m[p.id] = p
	w.mu.Unlock()
}

// take removes and returns the waiter for id, or nil if it is gone.
func (w *waiters) take(id uint64) *proposal {
	w.mu.Lock()
	p := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	return p
}

func (w *waiters) deliver(id uint64, r proposalResult) {
	if p := w.take(id); p != nil {
		p.resc <- r
	}
}

// deliverApplied wakes the callers of the commands of one applied batch,
// taking the lock once for the batch rather than once per command. The
// sends cannot block under it: a waiter's channel has room for the one
// result, and only whoever removed the waiter writes it.
func (w *waiters) deliverApplied(applied []storage.Applied) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range applied {
		a := &applied[i]
		if a.ID == 0 {
			continue
		}
		if p := w.m[a.ID]; p != nil {
			delete(w.m, a.ID)
			p.resc <- proposalResult{res: a.Result}
		}
	}
}

// failAll ends every waiter with err (or, for commands already handed
// to Raft, with ErrAmbiguous as well).
func (w *waiters) failAll(err error) {
	w.mu.Lock()
	ps := w.m
	w.m = make(map[uint64]*proposal)
	w.mu.Unlock()
	for _, p := range ps {
		e := err
		if p.handed.Load() {
			e = fmt.Errorf("%w: %w", errs.Ambiguous, err)
		}
		p.resc <- proposalResult{err: e}
	}
}

// endCoveredBySnapshot ends the waiters a snapshot may have overtaken.
// It runs on the raft loop once the snapshot at index replaced the state
// machine, so every entry committed before it either applied (and woke
// its waiter) or is inside the snapshot, whose state says nothing of
// which command made it. A command handed to Raft may be either inside
// it or still to commit after it; which one cannot be told, so each ends
// at once with ErrAmbiguous rather than waiting for an apply that may
// never come. Commands not yet handed to Raft wait on. Readers waiting
// for an index are released by the apply loop when it reaches the
// snapshot's.
func (n *Node) endCoveredBySnapshot(index uint64) {
	err := fmt.Errorf("%w: a snapshot (index %d) replaced this member's state while the command was in flight",
		errs.Ambiguous, index)
	n.waiters.mu.Lock()
	var ended []*proposal
	for id, p := range n.waiters.m {
		if p.handed.Load() {
			ended = append(ended, p)
			delete(n.waiters.m, id)
		}
	}
	n.waiters.mu.Unlock()
	for _, p := range ended {
		p.resc <- proposalResult{err: err}
	}
}

// Propose replicates cmd (setting its ID) and waits until it applied on
// this member, returning the state machine's result.
//
// Errors: ErrNoQuorum (wrapping the context's error) when the command
// never reached Raft because no leader was reachable; ErrAmbiguous
// (wrapping the context's error) when it reached Raft but was not seen to
// apply before ctx ended or leadership changed; ErrClosed when the node
// stopped.
func (n *Node) Propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	res, err := n.propose(ctx, cmd)
	n.counters.countProposal(err)
	return res, err
}

func (n *Node) propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	if err := ctx.Err(); err != nil {
		return command.Result{}, err
	}
	select {
	case <-n.stopc:
		return command.Result{}, n.errStopped()
	default:
	}
	cmd.ID = n.waiters.newID()
	data, err := command.Encode(cmd)
	if err != nil {
		return command.Result{}, fmt.Errorf("%w: encode command: %v", errs.Internal, err)
	}
	p := &proposal{id: cmd.ID, data: data, resc: make(chan proposalResult, 1)}
	n.waiters.add(p)
	select {
	case n.propc <- p:
	case <-ctx.Done():
		n.waiters.take(p.id)
		return command.Result{}, fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
	case <-n.stopc:
		n.waiters.take(p.id)
		return command.Result{}, n.errStopped()
	}
	select {
	case r := <-p.resc:
		return r.res, r.err
	case <-ctx.Done():
		return n.abandon(p, ctx.Err())
	case <-n.stopc:
		return n.abandon(p, n.errStopped())
	}
}

// abandon stops waiting for p, unless its result raced in.
func (n *Node) abandon(p *proposal, cause error) (command.Result, error) {
	waiting, handed := n.waiters.giveUp(p)
	if !waiting {
		r := <-p.resc
		return r.res, r.err
	}
	if handed {
		return command.Result{}, fmt.Errorf("%w: %w", errs.Ambiguous, cause)
	}
	return command.Result{}, fmt.Errorf("%w: %w", errs.NoQuorum, cause)
}

// giveUp removes p's waiter and reports whether it was still there and
// whether p had been handed to Raft. handed is read under the lock
// markHanded marks it under: once the waiter is gone, p is never handed
// over.
func (w *waiters) giveUp(p *proposal) (waiting, handed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, waiting = w.m[p.id]
	delete(w.m, p.id)
	return waiting, p.handed.Load()
}

// markHanded marks the proposals of ps whose callers still wait as handed
// to Raft and returns them, reusing ps's storage; the others' callers
// gave up and were told their command did not happen, so it must not.
// Marking under the lock abandon takes makes the two exclusive: a caller
// either removed its waiter first (and its proposal is dropped here) or
// finds it marked (and reports ErrAmbiguous).
func (w *waiters) markHanded(ps []*proposal) []*proposal { return w.keepWaiting(ps, true) }

// stillWaiting returns the proposals of ps whose callers still wait,
// reusing ps's storage.
func (w *waiters) stillWaiting(ps []*proposal) []*proposal { return w.keepWaiting(ps, false) }

func (w *waiters) keepWaiting(ps []*proposal, hand bool) []*proposal {
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := ps[:0]
	for _, p := range ps {
		if _, ok := w.m[p.id]; ok {
			if hand {
				p.handed.Store(true)
			}
			keep = append(keep, p)
		}
	}
	clear(ps[len(keep):])
	return keep
}

// NewRequestID returns an ID unique to this member's incarnation, for
// requests that need to match their answers.
func (n *Node) NewRequestID() uint64 { return n.waiters.newID() }
