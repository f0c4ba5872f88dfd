package coord

import (
	"context"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/sessions"
)

// maxTTLServing bounds the time-to-live questions from other members that
// the leader answers at once: each holds a goroutine for up to an
// election timeout, so a member asking in a loop cannot grow them without
// bound. Beyond it questions are dropped, and their askers ask again.
const maxTTLServing = 64

// ttlState is the engine's time-to-live questions: those it asked the
// leader (by sequence number) and how many it is answering. It is
// guarded by the engine's mu.
type ttlState struct {
	seq     uint64
	waiting map[uint64]ttlWait
	serving int
}

type ttlWait struct {
	to     string // the member asked: only its answer counts
	answer chan sessions.TTLAnswer
}

// timeToLive asks the leader until it answers for the session, every
// quarter election timeout (a change of leader, a table still loading,
// a lost message, a session whose expiry is under way).
func (e *sessionEngine) timeToLive(ctx context.Context, id SessionID) (time.Duration, error) {
	t := time.NewTicker(max(e.et/4, time.Millisecond))
	defer t.Stop()
	for {
		left, st := e.askTTL(ctx, id)
		switch st {
		case sessions.TTLAlive:
			return left, nil
		case sessions.TTLGone:
			return 0, fmt.Errorf("%w: session %d has ended in the cell", ErrSessionExpired, id)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-e.life.Done():
			return 0, ErrClosed
		case <-t.C:
		}
	}
}

// askTTL asks the leader once, waiting at most an election timeout.
func (e *sessionEngine) askTTL(ctx context.Context, id SessionID) (time.Duration, sessions.TTLStatus) {
	st := e.n.raft.Status()
	if st.Leader == 0 {
		return 0, sessions.TTLRetry
	}
	ctx, cancel := context.WithTimeout(ctx, e.et)
	defer cancel()
	if st.Leader == st.ID {
		return e.answerTTL(ctx, id)
	}
	to, ok := e.n.raft.MemberName(st.Leader)
	if !ok {
		return 0, sessions.TTLRetry
	}
	w := ttlWait{to: to, answer: make(chan sessions.TTLAnswer, 1)}
	e.mu.Lock()
	e.ttl.seq++
	seq := e.ttl.seq
	e.ttl.waiting[seq] = w
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.ttl.waiting, seq)
		e.mu.Unlock()
	}()
	data, err := sessions.EncodeTTL(&sessions.TTLMessage{Query: &sessions.TTLQuery{Seq: seq, ID: int64(id)}})
	if err != nil {
		return 0, sessions.TTLRetry
	}
	if err := e.n.sendApp(to, appSessions, data); err != nil {
		return 0, sessions.TTLRetry
	}
	select {
	case a := <-w.answer:
		return a.Left, a.Status
	case <-ctx.Done():
		return 0, sessions.TTLRetry
	}
}

// answerTTL answers for the session from this member's table, if it
// leads. The deadline is read first and leadership confirmed after (a
// read barrier), so no later leader existed when it was read: the
// answer is the cell's, not a deposed leader's.
func (e *sessionEngine) answerTTL(ctx context.Context, id SessionID) (time.Duration, sessions.TTLStatus) {
	e.mu.Lock()
	l := e.lead
	e.mu.Unlock()
	if l == nil {
		return 0, sessions.TTLRetry
	}
	select {
	case <-l.Ready():
	case <-ctx.Done():
		return 0, sessions.TTLRetry
	}
	deadline, st := l.Deadline(int64(id))
	if st != sessions.TTLAlive {
		return 0, st
	}
	if err := e.n.raft.ReadBarrier(ctx); err != nil {
		return 0, sessions.TTLRetry
	}
	e.mu.Lock()
	still := e.lead == l
	e.mu.Unlock()
	left := time.Until(deadline)
	if !still || left <= 0 {
		// Another term began, or the deadline passed and the expiry is
		// on its way: ask again, to hear the outcome.
		return 0, sessions.TTLRetry
	}
	return left, sessions.TTLAlive
}

// onTTL handles a time-to-live message from another member (raft loop:
// must not block). A question is answered on a goroutine of its own; an
// answer goes to the question it names, if from the member asked.
func (e *sessionEngine) onTTL(from string, data []byte) {
	m, err := sessions.DecodeTTL(data)
	if err != nil {
		e.n.cfg.Logger.Warn("dropped malformed time-to-live message", "from", from, "err", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if a := m.Answer; a != nil {
		if w, ok := e.ttl.waiting[a.Seq]; ok && w.to == from {
			select {
			case w.answer <- *a:
			default: // answered already (a duplicate)
			}
		}
		return
	}
	if e.ttl.serving >= maxTTLServing {
		return
	}
	q := *m.Query
	e.ttl.serving++
	e.spawnLocked(func() {
		ctx, cancel := context.WithTimeout(e.life, e.et)
		left, st := e.answerTTL(ctx, SessionID(q.ID))
		cancel()
		e.mu.Lock()
		e.ttl.serving--
		e.mu.Unlock()
		data, err := sessions.EncodeTTL(&sessions.TTLMessage{Answer: &sessions.TTLAnswer{Seq: q.Seq, Status: st, Left: left}})
		if err == nil {
			_ = e.n.sendApp(from, appSessions, data)
		}
	})
}

// TimeToLive answers a client's question for one of its own sessions: the
// member asks the leader as it does for its own, and adds the session's
// granted TTL. Another client's session
// is ErrForbidden, so that clients cannot probe each other's.
func (h *clientHandler) TimeToLive(ctx context.Context, _ string, q *clientwire.TimeToLive) (*clientwire.TimeToLiveResult, error) {
	owned, foreign, gone, err := h.sortSessions(ctx, []int64{q.SessionID})
	switch {
	case err != nil:
		return nil, err
	case len(foreign) > 0:
		return nil, fmt.Errorf("%w: session %d is not this client's", ErrForbidden, q.SessionID)
	case len(gone) > 0:
		return nil, fmt.Errorf("%w: session %d has ended in the cell", ErrSessionExpired, q.SessionID)
	}
	left, err := h.n.sessions.timeToLive(ctx, SessionID(q.SessionID))
	if err != nil {
		return nil, err
	}
	// The granted TTL too: a client resuming the session by ID learns it here.
	return &clientwire.TimeToLiveResult{Left: left, TTL: owned[SessionID(q.SessionID)]}, nil
}
