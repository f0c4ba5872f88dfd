package raftnode

import (
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Every command proposed here names a proposer (command.Proposer), and
// the state machine applies each proposer's command once however many
// copies reach the log (storage's proposer table). So a command may be
// handed to Raft again whenever it may have been lost, and that is what
// the core does, which turns Raft's silence about dropped proposals
// into an answer for every caller:
//
//   - a follower forwards proposals to its leader, and Raft never says
//     when such a message is dropped (by the network, by a leader that
//     stepped down or is handing over); a forward not seen to apply is
//     sent again after resendTicks, then at doubling intervals up to an
//     election timeout;
//   - after a change of term every command handed and still waiting is
//     handed again as soon as the new leader is known: the old leader
//     may have lost it, and waiting out a grace period would hold every
//     in-flight write for two election timeouts.
//
// A caller therefore waits until its command applies, or its context
// ends (ErrAmbiguous, with the command's proposer and sequence number so
// the outcome can be settled later), or the member stops.

// resendTicks is how long, in ticks, a follower waits for a forwarded
// command to apply before handing it to Raft again: twice the heartbeat
// interval, at least two ticks, so a forward is not resent while the
// leader's commit is merely on its way.
func (c *core) resendTicks() uint64 {
	return uint64(max(2*c.cfg.HeartbeatTicks, 2))
}

// markSent records that ps were just handed to Raft.
func (c *core) markSent(ps []*proposal) {
	for _, p := range ps {
		p.sentTick = c.tick
		if p.backoff == 0 {
			p.backoff = c.resendTicks()
		}
	}
}

// resendDue hands Raft again every handed command that has not applied
// within its backoff (all of them with all set), while a leader is known.
// A leader hands its own commands again only after a change of term: in
// its own term it appended them itself.
func (c *core) resendDue(all bool) {
	if c.lead == 0 || len(c.handed) == 0 {
		return
	}
	if !all && c.lead == c.id {
		return
	}
	due := false
	for _, p := range c.handed {
		if all || c.tick-p.sentTick >= p.backoff {
			due = true
			break
		}
	}
	if !due {
		return
	}
	c.handed = c.waiters.stillWaiting(c.handed)
	var ents []*pb.Entry
	var sent []*proposal
	for _, p := range c.handed {
		if !all && c.tick-p.sentTick < p.backoff {
			continue
		}
		ents = append(ents, &pb.Entry{Data: p.data})
		sent = append(sent, p)
	}
	if len(ents) == 0 {
		return
	}
	err := c.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(c.id), Entries: ents})
	if errors.Is(err, raft.ErrProposalDropped) {
		return // no leader to take them yet (a hand-over): next tick
	}
	if err != nil {
		c.log.Error("propose again", "err", err)
		return
	}
	et := uint64(c.cfg.ElectionTicks)
	for _, p := range sent {
		p.sentTick = c.tick
		if !all {
			p.backoff = min(2*p.backoff, et)
		}
	}
	c.counters.resent.Add(uint64(len(sent)))
}

// AmbiguousError is the error of a command handed to Raft whose caller
// stopped waiting (its context ended, the member stopped) before it was
// seen to apply: it may have applied, or may still. Proposer names it, so
// the outcome can be settled (a KindResolve of the same proposer).
type AmbiguousError struct {
	Proposer command.Proposer
	Err      error
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%v: %v", errs.Ambiguous, e.Err)
}

// Unwrap makes the error both ErrAmbiguous and its cause.
func (e *AmbiguousError) Unwrap() []error { return []error{errs.Ambiguous, e.Err} }
