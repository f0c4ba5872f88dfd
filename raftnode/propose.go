package raftnode

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/proposer"
	"github.com/coordcell/coord/storage"
)

// proposal is one caller's command on its way through Raft.
type proposal struct {
	id   uint64
	data []byte
	// prop is the command's proposer (every command proposed here has
	// one: this member's, or the client's it forwards), so that the
	// proposer table can be asked after it and its sequence number
	// released.
	prop command.Proposer
	// own is set when prop is this member's proposer, whose sequence
	// numbers the waiters hand out and release.
	own  bool
	resc chan proposalResult // buffered 1; written once, by whoever removes the waiter
	// handed is set once the core gave the command to Raft: from then
	// on its outcome is unknown until it applies (ErrAmbiguous), before
	// then it certainly did not happen.
	handed atomic.Bool
	// sentTick and backoff belong to the core's driver: when the command was
	// last handed to Raft, and how many ticks to wait before handing it
	// again should it not have applied (resend.go); queuedTick, when it
	// reached the core.
	sentTick, backoff, queuedTick uint64
}

type proposalResult struct {
	res command.Result
	err error
}

// waiters maps command IDs to the proposals waiting for them to apply,
// and numbers this member's commands for the proposer table.
type waiters struct {
	mu   sync.Mutex
	m    map[uint64]*proposal
	next atomic.Uint64
	// proposer is this boot's proposer ID: random, so a restarted member
	// never meets the records of its earlier boots.
	proposer uint64
	seqs     *proposer.Window // guarded by mu
}

func (w *waiters) init() {
	w.m = make(map[uint64]*proposal)
	// A random start keeps IDs from one incarnation (or one member)
	// from matching another's waiters when old log entries replay.
	w.next.Store(rand.Uint64())
	w.proposer = proposer.NewID()
	w.seqs = proposer.NewWindow()
}

func (w *waiters) newID() uint64 {
	for {
		if id := w.next.Add(1); id != 0 {
			return id
		}
	}
}

// stamp gives cmd this member's proposer and its next sequence number,
// unless it has a proposer already (a client's), and returns the
// proposal to wait on.
func (w *waiters) stamp(cmd *command.Command, born uint64) *proposal {
	w.mu.Lock()
	defer w.mu.Unlock()
	cmd.ID = w.newID()
	p := &proposal{id: cmd.ID, resc: make(chan proposalResult, 1)}
	if cmd.Proposer == nil {
		seq, floor := w.seqs.Take()
		p.prop = command.Proposer{ID: w.proposer, Seq: seq, Floor: floor, Born: born}
		p.own = true
		cmd.Proposer = &p.prop // one allocation with the proposal
		return p
	}
	p.prop = *cmd.Proposer
	return p
}

func (w *waiters) add(p *proposal) {
	w.mu.Lock()
	w.m[p.id] = p
	w.mu.Unlock()
}

// removeLocked forgets p's waiter; pin keeps its sequence number's result
// wanted (an outcome the caller was not told and may ask for).
func (w *waiters) removeLocked(p *proposal, pin bool) {
	delete(w.m, p.id)
	if !p.own {
		return
	}
	if pin {
		w.seqs.Pin(p.prop.Seq)
	} else {
		w.seqs.Done(p.prop.Seq)
	}
}

// take removes and returns the waiter for id, or nil if it is gone.
func (w *waiters) take(id uint64) *proposal {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.m[id]
	if p != nil {
		w.removeLocked(p, false)
	}
	return p
}

// applied removes the waiters of the commands of one applied batch and
// appends their answers to buf, taking the lock once for the batch
// rather than once per command.
func (w *waiters) applied(applied []storage.Applied, buf []answer) []answer {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range applied {
		a := &applied[i]
		if a.ID == 0 {
			continue
		}
		if p := w.m[a.ID]; p != nil {
			w.removeLocked(p, false)
			buf = append(buf, answer{prop: p, res: a.Result})
		}
	}
	return buf
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
			e = &AmbiguousError{Proposer: p.prop, Err: err}
		}
		p.resc <- proposalResult{err: e}
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
	p := n.c.waiters.stamp(cmd, n.applied.get())
	data, err := command.Encode(cmd)
	if err != nil {
		n.c.waiters.release(p)
		return command.Result{}, fmt.Errorf("%w: encode command: %v", errs.Internal, err)
	}
	p.data = data
	n.c.waiters.add(p)
	select {
	case n.propc <- p:
	case <-ctx.Done():
		n.c.waiters.release(p)
		return command.Result{}, fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
	case <-n.stopc:
		n.c.waiters.release(p)
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
	waiting, handed := n.c.waiters.giveUp(p)
	if !waiting {
		r := <-p.resc
		return r.res, r.err
	}
	if handed {
		return command.Result{}, &AmbiguousError{Proposer: p.prop, Err: cause}
	}
	if errors.Is(cause, errs.Closed) {
		// The member stopped before Raft had it: not applied, and the
		// reason is the stop, not the cell's quorum. A client told
		// ErrNoQuorum by a member it wrote through took that for the
		// cell's answer and gave up (seed 6214853903376234965 of
		// TestClientWriteSurvivesItsMember); told ErrClosed it sends the
		// write through the next member.
		return command.Result{}, cause
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
	handed = p.handed.Load()
	if waiting {
		// A caller told ErrAmbiguous may ask for the outcome later: its
		// result stays wanted for a while.
		w.removeLocked(p, handed)
	}
	return waiting, handed
}

// release forgets a proposal that was never handed to Raft.
func (w *waiters) release(p *proposal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.m[p.id]; ok || p.own {
		delete(w.m, p.id)
		if p.own {
			w.seqs.Done(p.prop.Seq)
		}
	}
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
func (n *Node) NewRequestID() uint64 { return n.c.waiters.newID() }
