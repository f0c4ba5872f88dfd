package coord

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/lease"
	"github.com/coordcell/coord/storage"
)

// sessionEngine keeps this member's sessions alive and, while this
// member leads, keeps every session's deadline and expires the dead ones.
// One goroutine (run) drives both sides on a ticker; keep-alive traffic
// and leadership changes arrive from the raft loop without blocking it.
type sessionEngine struct {
	n  *Node
	et time.Duration // one election timeout

	inbox chan inbound  // keep-alives and acks from other members
	poke  chan struct{} // leadership changed or a session was added: look now
	// life ends when the node closes; every goroutine of the engine
	// derives its context from it.
	life    context.Context
	endLife context.CancelFunc
	wg      sync.WaitGroup // run and the goroutines it starts
	mu      sync.Mutex     // guards what follows
	local   map[SessionID]*Session
	fresh   bool // a session was added since the last keep-alive
	seq     uint64
	sent    map[uint64]sentBatch // recent keep-alives awaiting an ack
	maxTTL  time.Duration        // the longest TTL of a local session so far
	lead    *leaderSessions      // non-nil while this member leads
}

type inbound struct {
	from string
	msg  *lease.Message
}

type sentBatch struct {
	at  time.Time
	ids []SessionID
}

// leaderSessions is the leader's side, for one term.
type leaderSessions struct {
	term   uint64
	ready  bool          // the table was loaded from the replicated state
	readyc chan struct{} // closed when ready is set
	table  *lease.Table
	ctx    context.Context // ends with the term
	cancel context.CancelFunc
}

func newSessionEngine(n *Node) *sessionEngine {
	e := &sessionEngine{
		n:     n,
		et:    n.electionTimeout(),
		inbox: make(chan inbound, 256),
		poke:  make(chan struct{}, 1),
		local: make(map[SessionID]*Session),
		sent:  make(map[uint64]sentBatch),
	}
	e.life, e.endLife = context.WithCancel(context.Background())
	return e
}

// margin is how much earlier than the cell the holder counts its session
// as expired: 2% of the TTL for the difference in clock rates between
// members, and a quarter election timeout because the holder looks at
// its deadline once per tick (so Done closes at most a tick after Until).
//
// No cushion is needed for a deposed leader that has not noticed yet:
// its expiries and credits carry its term and apply only in that term,
// so once a successor is elected nothing it decides takes effect (see
// handleKeepAlive for why a successor then grants at least TTL from the
// send of every keep-alive a leader acknowledged).
func (e *sessionEngine) margin(ttl time.Duration) time.Duration { return e.et/4 + ttl/50 }

func (e *sessionEngine) start() {
	e.wg.Add(1)
	go e.run()
}

func (e *sessionEngine) close() {
	e.endLife()
	e.wg.Wait()
	e.mu.Lock()
	local := slices.Collect(mapValues(e.local))
	e.mu.Unlock()
	for _, s := range local {
		s.end(ErrClosed)
	}
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// add starts keeping s alive. Its first keep-alive goes out at the next
// tick rather than on its own, so that a burst of new sessions shares
// keep-alives (one per tick for all) instead of sending one each.
func (e *sessionEngine) add(s *Session) {
	e.mu.Lock()
	e.local[s.id] = s
	e.fresh = true
	e.maxTTL = max(e.maxTTL, s.ttl)
	e.mu.Unlock()
}

func (e *sessionEngine) remove(id SessionID) {
	e.mu.Lock()
	delete(e.local, id)
	e.mu.Unlock()
}

func (e *sessionEngine) nudge() {
	select {
	case e.poke <- struct{}{}:
	default:
	}
}

// onLeader is raftnode's OnLeader hook (raft loop: must not block).
func (e *sessionEngine) onLeader(lead, term uint64) { e.nudge() }

// onMessage is raftnode's OnMessage hook (raft loop: must not block).
// Keep-alives are periodic, so one dropped when the inbox is full costs
// nothing but a retry.
func (e *sessionEngine) onMessage(from string, data []byte) {
	m, err := lease.Decode(data)
	if err != nil {
		e.n.cfg.Logger.Warn("dropped malformed session message", "from", from, "err", err)
		return
	}
	select {
	case e.inbox <- inbound{from: from, msg: m}:
	default:
	}
}

// onApply is called on the apply goroutine with what each batch did.
func (e *sessionEngine) onApply(out storage.ApplyOutput) {
	if len(out.SessionsCreated) == 0 && len(out.SessionsEnded) == 0 {
		return
	}
	now := time.Now()
	e.mu.Lock()
	if l := e.lead; l != nil {
		for _, c := range out.SessionsCreated {
			l.table.Add(c.ID, time.Duration(c.TTL), now)
		}
		for _, id := range out.SessionsEnded {
			l.table.Remove(id)
		}
	}
	var ended []*Session
	for _, id := range out.SessionsEnded {
		if s, ok := e.local[SessionID(id)]; ok {
			ended = append(ended, s)
		}
	}
	e.mu.Unlock()
	for _, s := range ended {
		e.endedByCell(s, "its end was applied")
	}
}

// endedByCell ends a local session the cell ended, with one INFO line if
// this is what ended it (not a Close from here, nor an earlier end).
func (e *sessionEngine) endedByCell(s *Session, how string) {
	if err := s.end(ErrSessionExpired); err == ErrSessionExpired {
		s.mu.Lock()
		lastAcked := s.lastAcked
		s.mu.Unlock()
		e.n.cfg.Logger.Info("session ended by the cell", "session", int64(s.id), "how", how,
			"last_confirmed_ago", time.Since(lastAcked).Round(time.Millisecond), "ttl", s.ttl)
	}
}

func (e *sessionEngine) run() {
	defer e.wg.Done()
	tick := time.NewTicker(max(e.et/4, time.Millisecond))
	defer tick.Stop()
	var lastSend time.Time
	for {
		// A paused member is silent as a whole: no keep-alives, no
		// expiries. On resume its first tick may decide from a table that
		// went stale while it slept; the term those decisions carry makes
		// the cell refuse them if another leader took over meanwhile.
		select {
		case <-e.n.raft.Unpaused():
		case <-e.life.Done():
			e.stepDown()
			return
		}
		select {
		case <-e.life.Done():
			e.stepDown()
			return
		case <-tick.C:
		case <-e.poke:
			e.followLeadership()
			lastSend = time.Time{} // a new leader hears from us at once
		case in := <-e.inbox:
			if in.msg.KeepAlive != nil {
				e.handleKeepAlive(in.from, in.msg.KeepAlive)
			} else {
				e.handleAck(in.msg.Ack)
			}
			continue
		}
		now := time.Now()
		e.followLeadership()
		if e.sendDue(now, lastSend) {
			lastSend = now
		}
		e.checkLocal(now)
		e.leaderTick(now)
	}
}

// --- the holder's side ---

// sendDue sends one keep-alive for every automatic local session when
// the most demanding of them is due (TTL/KeepAliveDivisor since the
// last), or sooner, every quarter election timeout, while the last one
// is unconfirmed: a failover must not eat into the holders' deadlines.
func (e *sessionEngine) sendDue(now, last time.Time) bool {
	e.mu.Lock()
	var ids []SessionID
	interval := time.Duration(1<<63 - 1)
	for id, s := range e.local {
		if s.manual {
			continue
		}
		ids = append(ids, id)
		interval = min(interval, s.ttl/lease.KeepAliveDivisor)
		if s.unconfirmed() {
			interval = min(interval, e.et/4)
		}
	}
	fresh := e.fresh
	e.fresh = false
	e.mu.Unlock()
	if len(ids) == 0 || (!fresh && now.Sub(last) < interval) {
		return false
	}
	return e.send(now, ids)
}

// send sends a keep-alive for ids to the leader.
func (e *sessionEngine) send(now time.Time, ids []SessionID) bool {
	st := e.n.raft.Status()
	if st.Leader == 0 {
		return false
	}
	e.mu.Lock()
	e.seq++
	seq := e.seq
	e.sent[seq] = sentBatch{at: now, ids: ids}
	for s := range e.sent {
		// An ack confirms its send time plus the TTL, so one that arrives
		// late (a loaded leader) is still worth having while that lies
		// ahead: keep each batch for as long as the longest TTL.
		if now.Sub(e.sent[s].at) > max(4*e.et+time.Second, e.maxTTL) {
			delete(e.sent, s) // unanswered: the leader moved on or the message was lost
		}
	}
	for _, id := range ids {
		if s, ok := e.local[id]; ok {
			s.mu.Lock()
			s.lastSent = now
			s.mu.Unlock()
		}
	}
	e.mu.Unlock()
	ka := &lease.KeepAlive{Seq: seq, IDs: make([]int64, len(ids))}
	for i, id := range ids {
		ka.IDs[i] = int64(id)
	}
	if st.Leader == st.ID {
		e.handleKeepAlive(e.n.cfg.Name, ka)
		return true
	}
	to, ok := e.n.raft.MemberName(st.Leader)
	if !ok {
		return false
	}
	data, err := lease.Encode(&lease.Message{KeepAlive: ka})
	if err != nil {
		return false
	}
	_ = e.n.sendApp(to, appSessions, data)
	return true
}

func (e *sessionEngine) handleAck(a *lease.Ack) {
	e.mu.Lock()
	b, ok := e.sent[a.Seq]
	delete(e.sent, a.Seq)
	var alive, gone []*Session
	if ok {
		for _, id := range a.Alive {
			if s, ok := e.local[SessionID(id)]; ok {
				alive = append(alive, s)
			}
		}
		for _, id := range a.Gone {
			if s, ok := e.local[SessionID(id)]; ok {
				gone = append(gone, s)
			}
		}
	}
	e.mu.Unlock()
	for _, s := range alive {
		s.confirmed(b.at)
	}
	for _, s := range gone {
		e.endedByCell(s, "the leader no longer knows it")
	}
}

// checkLocal moves local sessions into jeopardy or local expiry. A session
// that expired here is also ended in the cell, so its locks pass on
// without waiting for the leader to notice.
func (e *sessionEngine) checkLocal(now time.Time) {
	e.mu.Lock()
	local := slices.Collect(mapValues(e.local))
	e.mu.Unlock()
	for _, s := range local {
		if s.check(now) {
			s.mu.Lock()
			lastAcked := s.lastAcked
			s.mu.Unlock()
			e.n.cfg.Logger.Info("session expired here: no keep-alive confirmed in time", "session", int64(s.id),
				"last_confirmed_ago", now.Sub(lastAcked).Round(time.Millisecond), "ttl", s.ttl)
			// The holder's own decision about its own session: valid in
			// any term, so it carries none.
			e.proposeAsync(&command.Command{Kind: command.KindSessionEnd,
				Session: &command.Session{ID: int64(s.id), Expired: true}})
		}
	}
}

// renew sends a keep-alive for one session now and waits until one is
// confirmed, resending every half election timeout.
func (e *sessionEngine) renew(ctx context.Context, s *Session) (time.Time, error) {
	t := time.NewTicker(e.et / 2)
	defer t.Stop()
	for {
		acked := s.ackChan()
		e.send(time.Now(), []SessionID{s.id})
		select {
		case <-acked:
			return s.Until(), nil
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-s.Done():
			return time.Time{}, s.Err()
		case <-t.C:
		}
	}
}

// --- the leader's side ---

// followLeadership starts or ends the leader's side as Raft's view changes.
func (e *sessionEngine) followLeadership() {
	st := e.n.raft.Status()
	leading := st.Leader == st.ID && st.Role == "leader"
	e.mu.Lock()
	l := e.lead
	e.mu.Unlock()
	switch {
	case leading && (l == nil || l.term != st.Term):
		e.stepDown()
		e.stepUp(st.Term)
	case !leading && l != nil:
		e.stepDown()
	}
}

func (e *sessionEngine) stepDown() {
	e.mu.Lock()
	l := e.lead
	e.lead = nil
	e.mu.Unlock()
	if l != nil {
		l.cancel()
	}
}

// stepUp begins a term as leader: the table starts empty (sessions created
// from now on are added by onApply) and is loaded from the replicated
// state once this leader has applied everything committed before it.
func (e *sessionEngine) stepUp(term uint64) {
	elected := time.Now()
	ctx, cancel := context.WithCancel(e.life)
	l := &leaderSessions{term: term, table: lease.New(elected, e.et), ctx: ctx, cancel: cancel,
		readyc: make(chan struct{})}
	e.mu.Lock()
	e.lead = l
	e.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for ctx.Err() == nil {
			// A read index is served only once an entry of this term has
			// committed (Raft's own no-op at election), and is at least
			// that entry's index: once applied here, every entry committed
			// before the election has been applied too. No entry of ours
			// is needed, which saves a log write and its round trip.
			pctx, pcancel := context.WithTimeout(ctx, 2*e.et)
			err := e.n.raft.ReadBarrier(pctx)
			pcancel()
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(e.et / 4):
				}
				continue
			}
			infos, err := e.n.sm.Sessions()
			if err != nil {
				return
			}
			e.mu.Lock()
			if e.lead == l {
				for _, si := range infos {
					l.table.Load(si.ID, time.Duration(si.TTL), time.Duration(si.Unheard))
				}
				l.ready = true
				close(l.readyc)
			}
			e.mu.Unlock()
			return
		}
	}()
}

// leaderTick credits unheard time and expires sessions past their deadline.
func (e *sessionEngine) leaderTick(now time.Time) {
	e.mu.Lock()
	l := e.lead
	if l == nil || !l.ready {
		e.mu.Unlock()
		return
	}
	credits := l.table.Credits(now, e.et/2, e.et)
	due := l.table.Due(now, 2*e.et)
	e.mu.Unlock()
	// Both decisions come from this term's table, so both carry the term:
	// if this member was deposed without noticing (paused, cut off) and
	// the proposal reaches the log in a later term (forwarded to the new
	// leader), the state machine refuses it.
	if len(credits) > 0 {
		c := &command.Session{Term: l.term, Credits: make([]command.Credit, len(credits))}
		for i, cr := range credits {
			c.Credits[i] = command.Credit{ID: cr.ID, Nanos: int64(cr.Unheard)}
		}
		e.proposeAsync(&command.Command{Kind: command.KindSessionCredit, Session: c})
	}
	for _, x := range due {
		e.expire(l, x)
	}
}

// expire proposes the end of a session whose deadline passed, and logs
// it once the cell ended it by this decision.
func (e *sessionEngine) expire(l *leaderSessions, x lease.Expiry) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithTimeout(e.life, 2*e.et)
		defer cancel()
		res, err := e.n.raft.Propose(ctx, &command.Command{Kind: command.KindSessionEnd,
			Session: &command.Session{ID: x.ID, Expired: true, Term: l.term}})
		if err != nil || res.Status != command.StatusOK || res.SessionID != x.ID {
			return // lost, refused as stale, or ended meanwhile: nothing to report
		}
		owner := x.Owner
		if owner == "" {
			owner = "unknown (not heard this term)"
		}
		e.n.cfg.Logger.Info("session expired", "session", x.ID, "owner", owner,
			"last_heard_ago", time.Since(x.LastHeard).Round(time.Millisecond), "ttl", x.TTL, "term", l.term)
	}()
}

// handleKeepAlive records a keep-alive at the leader and acknowledges it
// once that is safe. An ack tells the holder that no leader will expire
// its sessions before the keep-alive's send time plus TTL. That holds if
//
//  1. this member led at some moment after the keep-alive arrived (time
//     r): then any later leader was elected after r, because a read
//     index is confirmed by a heartbeat round that a majority answered
//     after r in this term, and a voter of a later term answers no
//     heartbeat of this one (read barrier below);
//  2. the sessions' unheard time in the replicated state is zero, or is
//     committed as zero (a KindSessionSeen of this term) before the ack:
//     a later leader grants TTL minus unheard time from its election, and
//     credits cover only time after the last keep-alive a leader heard,
//     so that grant ends at or after r + TTL; and
//  3. no expiry decided before r applies: this leader's own table holds
//     the session until r + TTL, and a deposed leader's decisions carry
//     its term and are refused outside it.
//
// That is the whole sequence, and its steps run side by side: the read
// barrier starts as soon as the keep-alive arrives, even before the
// table has loaded (which itself waits for a read barrier of this term,
// see stepUp), and a seen mark, when one is needed, is proposed while
// the barrier is out. Nothing of it is waited for in turn, so after a
// leader change the first keep-alive is answered about one heartbeat
// round after the election's no-op commits. Invariant 6 follows: every
// session the new leader loads gets TTL (less unheard time that no ack
// covered) from its election, and only this leader's own table, never a
// predecessor's, can expire it.
//
// A keep-alive that arrives before the table is ready is held, not
// dropped: its answer goes out once the table is loaded.
func (e *sessionEngine) handleKeepAlive(from string, ka *lease.KeepAlive) {
	arrived := time.Now()
	e.mu.Lock()
	l := e.lead
	e.mu.Unlock()
	if l == nil {
		return // not leading: the holder retries with the leader it sees
	}
	e.wg.Add(2)
	barrier := make(chan error, 1)
	ctx, cancel := context.WithTimeout(l.ctx, 2*e.et)
	go func() {
		defer e.wg.Done()
		barrier <- e.n.raft.ReadBarrier(ctx)
	}()
	go func() {
		defer e.wg.Done()
		defer cancel()
		select {
		case <-l.readyc:
		case <-ctx.Done():
			return
		}
		alive, gone, seen, ok := e.classify(l, from, ka, arrived)
		if !ok {
			return
		}
		if len(seen) > 0 {
			res, err := e.n.raft.Propose(ctx, &command.Command{Kind: command.KindSessionSeen,
				Session: &command.Session{IDs: seen, Term: l.term}})
			if err == nil && res.Status == command.StatusOK {
				e.mu.Lock()
				if e.lead == l {
					for _, id := range seen {
						l.table.Seen(id)
					}
				}
				e.mu.Unlock()
				alive = append(alive, seen...)
			}
		}
		if err := <-barrier; err != nil {
			return
		}
		e.mu.Lock()
		still := e.lead == l
		e.mu.Unlock()
		if !still {
			return
		}
		ack := &lease.Ack{Seq: ka.Seq, Alive: alive, Gone: gone}
		if from == e.n.cfg.Name {
			e.handleAck(ack)
			return
		}
		if data, err := lease.Encode(&lease.Message{Ack: ack}); err == nil {
			_ = e.n.sendApp(from, appSessions, data)
		}
	}()
}

// classify records a keep-alive that arrived at arrived in the ready
// table l, and sorts its sessions: alive, gone (ended in the cell), or
// needing a seen mark first. ok is false if l no longer leads.
func (e *sessionEngine) classify(l *leaderSessions, from string, ka *lease.KeepAlive, arrived time.Time) (alive, gone, seen []int64, ok bool) {
	// A session's ID is the index of its creation, and onApply adds it to
	// the table before the applied index moves past it: read the index
	// first, so an unknown session at or below it has certainly ended
	// (this leader may apply a creation later than the holder's member).
	applied := e.n.raft.AppliedIndex()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lead != l {
		return nil, nil, nil, false
	}
	for _, id := range ka.IDs {
		known, needsSeen := l.table.Heard(id, from, arrived)
		switch {
		case !known && uint64(id) <= applied:
			gone = append(gone, id)
		case !known:
			// Not applied here yet: neither alive nor gone.
		case needsSeen:
			seen = append(seen, id)
		default:
			alive = append(alive, id)
		}
	}
	return alive, gone, seen, true
}

// proposeAsync proposes a bookkeeping command without waiting: if it is
// lost, the next tick proposes it again.
func (e *sessionEngine) proposeAsync(cmd *command.Command) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithTimeout(e.life, 2*e.et)
		defer cancel()
		_, _ = e.n.raft.Propose(ctx, cmd)
	}()
}
