package member

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/sessions"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/raftnode"
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
	// held are the local sessions, those a renew waits on (the next
	// tick's batch carries them even if manual), and the recent
	// keep-alives awaiting an ack, each with the client keep-alives
	// folded into it: its ack answers them.
	held   *spi.Holding[[]*clientWaiter]
	fresh  bool             // a session was added since the last keep-alive
	closed bool             // close has begun: add no goroutine
	lead   *sessions.Leader // non-nil while this member leads
	// clients holds the keep-alives of clients' sessions waiting for
	// this member's next batch (client_serve_keepalive.go).
	clients clientFold
	// batches counts the keep-alive messages this member sent to the
	// leader (its own included), for tests and metrics.
	batches atomic.Uint64
	// ttl holds the time-to-live questions asked and answered
	// (session_ttl.go).
	ttl ttlState
}

var _ spi.Keeper = (*sessionEngine)(nil)

type inbound struct {
	from string
	msg  *sessions.Message
}

func newSessionEngine(n *Node) *sessionEngine {
	e := &sessionEngine{
		n:     n,
		et:    n.electionTimeout(),
		inbox: make(chan inbound, 256),
		poke:  make(chan struct{}, 1),
		held:  spi.NewHolding[[]*clientWaiter](),
	}
	e.clients.init()
	e.ttl.waiting = make(map[uint64]ttlWait)
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
func (e *sessionEngine) Margin(ttl time.Duration) time.Duration { return spi.Margin(e.et, ttl) }

func (e *sessionEngine) start() {
	e.wg.Add(1)
	go e.run()
}

func (e *sessionEngine) close() {
	e.mu.Lock()
	e.closed = true // no goroutine is added from now on (spawnLocked)
	e.mu.Unlock()
	e.endLife()
	e.wg.Wait()
	e.mu.Lock()
	local := e.held.Sessions()
	e.mu.Unlock()
	for _, s := range local {
		s.End(errs.Closed)
	}
}

// add starts keeping s alive. Its first keep-alive goes out at the next
// tick rather than on its own, so that a burst of new sessions shares
// keep-alives (one per tick for all) instead of sending one each.
func (e *sessionEngine) Add(s *spi.Session) {
	e.mu.Lock()
	e.held.Add(s)
	e.fresh = true
	e.mu.Unlock()
}

// Adopt starts keeping s alive, unless a session of its ID is kept here
// already; it reports whether it did.
func (e *sessionEngine) Adopt(s *spi.Session) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held.Has(s.ID()) {
		return false
	}
	e.held.Add(s)
	e.fresh = true
	return true
}

// Remove stops keeping session id alive.
func (e *sessionEngine) Remove(id int64) {
	e.mu.Lock()
	e.held.Remove(id)
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
	if sessions.IsTTL(data) {
		e.onTTL(from, data)
		return
	}
	m, err := sessions.Decode(data)
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
	e.mu.Lock()
	if l := e.lead; l != nil {
		created := make([]sessions.Created, len(out.SessionsCreated))
		for i, c := range out.SessionsCreated {
			created[i] = sessions.Created{ID: c.ID, TTL: time.Duration(c.TTL)}
		}
		l.Applied(created, out.SessionsEnded)
	}
	var ended []*spi.Session
	for _, id := range out.SessionsEnded {
		if s, ok := e.held.Get(id); ok {
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
func (e *sessionEngine) endedByCell(s *spi.Session, how string) {
	if err := s.End(errs.SessionExpired); err == errs.SessionExpired {
		e.n.cfg.Logger.Info("session ended by the cell", "session", s.ID(), "how", how,
			"last_confirmed_ago", time.Since(s.LastAcked()).Round(time.Millisecond), "ttl", s.TTL())
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
		e.mu.Lock()
		l := e.lead
		e.mu.Unlock()
		if l != nil {
			l.Tick()
		}
	}
}

// --- the holder's side ---

// sendDue sends one keep-alive for every automatic local session and
// every folded client keep-alive when the most demanding of them is due
// (TTL/KeepAliveDivisor since the last regular batch), or sooner, every
// quarter election timeout, while the last one is unconfirmed: a
// failover must not eat into the holders' deadlines. It reports whether
// it sent such a regular batch, which sets the phase of the next.
// Otherwise it sends an early batch for just the client keep-alives that
// cannot wait (clientFold), leaving the phase alone.
//
// A batch is due half a tick early: last is the time of a tick, and a
// later tick that runs a little ahead of the ticker's schedule must not
// push the batch a whole tick late, so that clients timing themselves
// from the member's batches can rely on one every interval.
func (e *sessionEngine) sendDue(now, last time.Time) bool {
	tick := max(e.et/4, time.Millisecond)
	e.mu.Lock()
	var ids []int64
	interval := time.Duration(1<<63 - 1)
	for id, s := range e.held.All() {
		if s.Manual() && !e.held.Urgent(id) {
			continue
		}
		ids = append(ids, id)
		interval = min(interval, s.TTL()/sessions.KeepAliveDivisor)
		if s.Unconfirmed() {
			interval = min(interval, e.et/4)
		}
	}
	pending, cinterval, early := e.clients.due(now, e.et)
	interval = min(interval, cinterval)
	fresh := e.fresh
	e.fresh = false
	e.held.ClearUrgent()
	e.mu.Unlock()
	if (len(ids) > 0 || pending) && (fresh || now.Sub(last) >= interval-tick/2) {
		return e.sendBatch(now, ids, true)
	}
	if early {
		e.sendBatch(now, nil, false)
	}
	return false
}

// sendBatch sends a keep-alive for ids and for the client keep-alives
// folded so far: all of them (a regular batch), or only those that
// cannot wait for the next regular one.
func (e *sessionEngine) sendBatch(now time.Time, ids []int64, allClients bool) bool {
	st := e.n.raft.Status()
	if st.Leader == 0 {
		return false
	}
	e.mu.Lock()
	// Taken only now, after the client keep-alives arrived: a batch
	// composed before one arrived never carries (so never confirms) it.
	cids, waiters := e.clients.take(now, e.et, allClients)
	ids = append(slices.Clip(ids), cids...)
	if len(ids) == 0 {
		e.mu.Unlock()
		return false
	}
	return e.sendLocked(st, now, ids, waiters)
}

// sendLocked sends one keep-alive for ids whose ack answers waiters.
// e.mu is held and is released.
func (e *sessionEngine) sendLocked(st raftnode.Status, now time.Time, ids []int64, waiters []*clientWaiter) bool {
	seq := e.held.Sent(now, e.et, ids, waiters)
	e.mu.Unlock()
	ka := &sessions.KeepAlive{Seq: seq, IDs: make([]int64, len(ids))}
	for i, id := range ids {
		ka.IDs[i] = int64(id)
	}
	if st.Leader == st.ID {
		e.batches.Add(1)
		e.handleKeepAlive(e.n.cfg.Name, ka)
		return true
	}
	to, ok := e.n.raft.MemberName(st.Leader)
	if !ok {
		return false
	}
	data, err := sessions.Encode(&sessions.Message{KeepAlive: ka})
	if err != nil {
		return false
	}
	e.batches.Add(1)
	_ = e.n.sendApp(to, appSessions, data)
	return true
}

func (e *sessionEngine) handleAck(a *sessions.Ack) {
	e.mu.Lock()
	b, alive, gone, ok := e.held.Answered(a.Seq, a.Alive, a.Gone)
	e.mu.Unlock()
	if ok {
		answerClients(b.With, a)
	}
	for _, s := range alive {
		s.Confirmed(b.At)
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
	local, gen := e.held.DueForCheck(now)
	e.mu.Unlock()
	if local == nil {
		return
	}
	next := spi.ExpiredHere(local, now, func(s *spi.Session) {
		e.n.cfg.Logger.Info("session expired here: no keep-alive confirmed in time", "session", s.ID(),
			"last_confirmed_ago", now.Sub(s.LastAcked()).Round(time.Millisecond), "ttl", s.TTL())
		// The holder's own decision about its own session: valid in
		// any term, so it carries none. It asks for the lock-delay of
		// the locks the session holds, as the leader's expiry would.
		e.ProposeAsync(&command.Command{Kind: command.KindSessionEnd,
			Session: &command.Session{ID: s.ID(), Expired: true, LockDelay: e.n.sessionLockDelayed(s.ID())}})
	})
	e.mu.Lock()
	e.held.CheckedUntil(next, gen)
	e.mu.Unlock()
}

// renew sends a keep-alive for one session now and waits until one is
// confirmed, resending every half election timeout.
func (e *sessionEngine) Renew(ctx context.Context, s *spi.Session) (time.Time, error) {
	// The next tick's batch carries s: renewals share one message, as
	// keep-alives do. A message per renewal made a burst of slow
	// creations (each confirmed by a renew) flood the leader's inbox, and
	// dropped keep-alives left sessions unconfirmed for minutes.
	return spi.RenewEvery(ctx, s, e.et/2, func() {
		e.mu.Lock()
		e.held.Urge(s.ID())
		e.fresh = true
		e.mu.Unlock()
	}, nil, nil)
}

// --- the leader's side (internal/sessions.Leader, one per term) ---

// followLeadership starts or ends the leader's side as Raft's view changes.
func (e *sessionEngine) followLeadership() {
	st := e.n.raft.Status()
	leading := st.Leader == st.ID && st.Role == raftnode.RoleLeader
	e.mu.Lock()
	l := e.lead
	e.mu.Unlock()
	switch {
	case leading && (l == nil || l.Term() != st.Term):
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
		l.Stop()
	}
}

// stepUp begins a term as leader. e.mu is held across the start so that
// onApply, which takes it too, records every creation applied from the
// moment the table exists: none can fall between its load and e.lead.
func (e *sessionEngine) stepUp(term uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := sessions.StartLeader(e.life, sessions.LeaderConfig{
		Term:            term,
		Cell:            leaderCell{e},
		Clock:           wallClock{},
		ElectionTimeout: e.et,
		Logger:          e.n.cfg.Logger,
	})
	e.lead = l
	e.spawnLocked(l.Wait)
}

// spawnLocked runs f on a goroutine the engine waits for at close, unless
// close has begun (then f does not run): an Add racing close's Wait
// would be a misuse of the WaitGroup. e.mu is held.
func (e *sessionEngine) spawnLocked(f func()) {
	if e.closed {
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// handleKeepAlive hands a keep-alive to the leader's side, if this member
// leads; otherwise the holder retries with the leader it sees.
func (e *sessionEngine) handleKeepAlive(from string, ka *sessions.KeepAlive) {
	e.mu.Lock()
	l := e.lead
	e.mu.Unlock()
	if l != nil {
		l.KeepAlive(from, ka)
	}
}

// wallClock is the production sessions.Clock: the monotonic wall clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// leaderCell is the member as the leader's side of sessions sees it.
type leaderCell struct{ e *sessionEngine }

func (c leaderCell) ReadBarrier(ctx context.Context) error { return c.e.n.raft.ReadBarrier(ctx) }

func (c leaderCell) Propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	res, err := c.e.n.raft.Propose(ctx, cmd)
	countProposed(&c.e.n.sessionStats, cmd, res, err) // the leader's expiries
	return res, err
}

func (c leaderCell) AppliedIndex() uint64 { return c.e.n.raft.AppliedIndex() }

func (c leaderCell) Sessions() (time.Duration, []sessions.Loaded, error) {
	clock, infos, err := c.e.n.sm.SessionState()
	if err != nil {
		return 0, nil, err
	}
	out := make([]sessions.Loaded, len(infos))
	for i, si := range infos {
		out[i] = sessions.Loaded{ID: si.ID, TTL: time.Duration(si.TTL), Unheard: time.Duration(si.Unheard), Silent: si.Silent}
	}
	return time.Duration(clock), out, nil
}

func (c leaderCell) Ack(to string, ack *sessions.Ack) {
	if to == c.e.n.cfg.Name {
		c.e.handleAck(ack)
		return
	}
	if data, err := sessions.Encode(&sessions.Message{Ack: ack}); err == nil {
		_ = c.e.n.sendApp(to, appSessions, data)
	}
}

// ProposeAsync proposes a command without waiting: if it is lost, the
// holder's next tick proposes it again.
func (e *sessionEngine) ProposeAsync(cmd *command.Command) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spawnLocked(func() {
		ctx, cancel := context.WithTimeout(e.life, 2*e.et)
		defer cancel()
		res, err := e.n.raft.Propose(ctx, cmd)
		countProposed(&e.n.sessionStats, cmd, res, err) // a local expiry
	})
}

// LockDelays lists the lock-delay markers in this member's applied state,
// for the sessions leader.
func (c leaderCell) LockDelays() ([]sessions.LockDelay, error) {
	ds, err := c.e.n.sm.LockDelays()
	if err != nil {
		return nil, err
	}
	out := make([]sessions.LockDelay, len(ds))
	for i, d := range ds {
		out[i] = sessions.LockDelay{Key: d.Key, CreateRev: d.CreateRev, Delay: d.Delay}
	}
	return out, nil
}

// SessionLockDelayed reports whether session id holds a lock key that
// asks for a lock-delay, so that its expiry is proposed flagged.
func (c leaderCell) SessionLockDelayed(id int64) bool { return c.e.n.sessionLockDelayed(id) }

// sessionLockDelayed reports whether session id holds, in this member's
// applied state, a lock key that asks for a lock-delay: whoever proposes
// its expiry sets command.Session.LockDelay from it.
func (n *Node) sessionLockDelayed(id int64) bool {
	delayed, err := n.sm.SessionLockDelayed(id)
	return err == nil && delayed
}
