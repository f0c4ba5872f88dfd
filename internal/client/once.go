package client

import (
	"sync"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/proposer"
)

// clientProposer numbers a client's writes for exactly-once application
// (outcome.go): one proposer ID per Client, so a write the client sends
// again through another member is the same write. The member that admits
// it names its owner, the client's authenticated identity, so no client
// can pass for another's proposer.
type clientProposer struct {
	id   uint64
	mu   sync.Mutex
	seqs *proposer.Window
}

func newClientProposer() clientProposer {
	return clientProposer{id: proposer.NewID(), seqs: proposer.NewWindow()}
}

// stamp gives cmd this client's proposer and next sequence number unless
// it names one already (an idempotency key, an Outcome's resolve), and
// returns the sequence number to release (0: none).
func (p *clientProposer) stamp(cmd *command.Command) uint64 {
	if cmd.Proposer != nil {
		return 0
	}
	p.mu.Lock()
	seq, floor := p.seqs.Take()
	p.mu.Unlock()
	cmd.Proposer = &command.Proposer{ID: p.id, Seq: seq, Floor: floor}
	return seq
}

// done releases seq: its write's outcome is known to its caller.
func (p *clientProposer) done(seq uint64) {
	if seq == 0 {
		return
	}
	p.mu.Lock()
	p.seqs.Done(seq)
	p.mu.Unlock()
}

// pin keeps seq's result askable for a while (Outcome).
func (p *clientProposer) pin(seq uint64) {
	if seq == 0 {
		return
	}
	p.mu.Lock()
	p.seqs.Pin(seq)
	p.mu.Unlock()
}
