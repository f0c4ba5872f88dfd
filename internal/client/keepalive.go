package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/sessions"
	"github.com/coordcell/coord/internal/spi"
)

// clientKeeper keeps a client's sessions alive: one KeepAlive message
// per interval carries every session, and the member folds it into its
// own batch to the leader, so a client costs the cell one message per
// interval however many sessions it holds. The client keeps in the phase
// of the member's batches (nextDueLocked), so its keep-alive waits on the
// member for a fraction of an election timeout, not up to an interval. An ack confirms each session
// with the client's own send time, so Until and jeopardy mean on a
// client what they mean on a member (the leader heard the keep-alive
// after the client sent it, and grants a TTL from then).
type clientKeeper struct {
	c    *Client
	poke chan struct{} // a session was added, or the client moved: send now

	// sends counts the KeepAlive messages sent, ids the session IDs they
	// carried, for tests and benchmarks.
	sends atomic.Int64
	ids   atomic.Int64

	mu sync.Mutex
	// held are the sessions, those a renew waits on, and the
	// keep-alives awaiting an ack.
	held *spi.Holding[struct{}]
	// fresh asks for a keep-alive of every session at the next tick (the
	// client moved to another member).
	fresh bool
	// added holds the sessions new since the last keep-alive: the next
	// tick sends a keep-alive of these and of those a renew waits on
	// (even if manual) alone, off the regular phase.
	added  map[int64]struct{}
	oldest time.Time // send time of the oldest keep-alive unanswered on this connection; zero when none
	// The phase of the regular keep-alives (nextDue): the last one's
	// sequence number and send time, and when its ack arrived (zero
	// until it does).
	lastSeq  uint64
	lastAt   time.Time
	ackAt    time.Time
	interval time.Duration // the regular interval at the last send
	waiters  map[uint64]chan struct{}
	closed   bool
	pendingW sync.WaitGroup // proposeAsync's goroutines
}

func newClientKeeper(c *Client) *clientKeeper {
	return &clientKeeper{c: c, poke: make(chan struct{}, 1), held: spi.NewHolding[struct{}](),
		waiters: make(map[uint64]chan struct{}), added: make(map[int64]struct{})}
}

func (k *clientKeeper) nudge() {
	select {
	case k.poke <- struct{}{}:
	default:
	}
}

// margin is the member's margin (see sessionEngine.margin): the client's
// send time precedes the leader's receipt, so the same bound holds one
// hop further out.
func (k *clientKeeper) Margin(ttl time.Duration) time.Duration {
	return spi.Margin(k.c.ElectionTimeout(), ttl)
}

// Add starts keeping s alive.
func (k *clientKeeper) Add(s *spi.Session) {
	k.mu.Lock()
	k.addLocked(s)
	k.mu.Unlock()
}

func (k *clientKeeper) addLocked(s *spi.Session) {
	k.held.Add(s)
	if !s.Manual() {
		k.added[s.ID()] = struct{}{}
		if iv := s.TTL() / sessions.KeepAliveDivisor; k.interval == 0 || iv < k.interval {
			k.interval = iv
		}
	}
}

// Remove stops keeping session id alive.
func (k *clientKeeper) Remove(id int64) {
	k.mu.Lock()
	k.held.Remove(id)
	k.mu.Unlock()
}

// reconnected is called once the client has a new member: every session
// hears from it at once, and what the old member left unanswered is
// forgotten (its acks will never come).
func (k *clientKeeper) reconnected() {
	k.mu.Lock()
	k.oldest = time.Time{}
	k.fresh = true
	k.lastSeq, k.lastAt, k.ackAt = 0, time.Time{}, time.Time{}
	k.mu.Unlock()
	k.nudge()
}

// foldWait is the longest a keep-alive waits on the member for the
// batch that carries it (clientFold): an eighth of an election timeout
// and the member's tick, or, at a member of an earlier build, half an
// interval more: the client allows for either.
func (k *clientKeeper) foldWait(interval time.Duration) time.Duration {
	et := k.c.ElectionTimeout()
	return interval/2 + et/8 + et/4
}

// stalled reports whether a keep-alive has gone unanswered on this
// connection for two election timeouts beyond the member's folding
// delay: the member is alive but cannot reach the leader (or is too
// slow), so the client should move on. Two election timeouts cover a
// change of leader, which stalls every member.
func (k *clientKeeper) stalled(now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.oldest.IsZero() && now.Sub(k.oldest) > k.foldWait(k.interval)+2*k.c.ElectionTimeout()
}

// moveLead is how long before a session's Until the client leaves a
// member that does not answer its keep-alives: time to connect to the
// next member and have a keep-alive confirmed there (its first batch
// goes at once; the leader answers one heartbeat round later), with room
// for a busy machine.
func moveLead(et time.Duration) time.Duration { return et * 5 / 4 }

// endangered reports whether a session would expire unless the client
// moves to another member now: a keep-alive has gone unanswered on this
// connection for half an election timeout, and a session kept alive
// here (not a lease, renewed on demand) has less than moveLead left of
// its Until. A member that cannot reach the leader
// (cut off, paused) is thus left in time for sessions of the minimum
// TTL, whose Until can be as little as 2.7 election timeouts after the
// member stops answering; stalled, tuned for longer TTLs and leader
// changes, comes later. During a change of leader this may move a
// client whose sessions are that close to expiry: the next member
// serves them as soon as the new leader is known.
func (k *clientKeeper) endangered(now time.Time) bool {
	et := k.c.ElectionTimeout()
	k.mu.Lock()
	if k.oldest.IsZero() || now.Sub(k.oldest) < et/2 {
		k.mu.Unlock()
		return false
	}
	local := k.held.Sessions()
	k.mu.Unlock()
	lead := moveLead(et)
	for _, s := range local {
		if s.Manual() || s.Err() != nil {
			continue
		}
		if s.Until().Sub(now) < lead {
			return true
		}
	}
	return false
}

func (k *clientKeeper) run() {
	et := k.c.ElectionTimeout()
	tick := time.NewTicker(max(et/4, time.Millisecond))
	defer tick.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		force := false
		select {
		case <-k.c.life.Done():
			return
		case <-tick.C:
		case <-due.C:
		case <-k.poke:
			force = true
		}
		now := time.Now()
		next := k.sendDue(now, force)
		k.checkLocal(now)
		// A timer rather than the tick, so the keep-alive leaves when its
		// phase says (nextDue), not up to a tick later.
		due.Reset(max(next.Sub(time.Now()), time.Millisecond))
	}
}

// sendDue sends one keep-alive for every automatic session when it is
// due (nextDue) or at once when forced or the client moved, and between
// those a keep-alive of only the sessions added or renewing since the
// last tick; it returns when the next regular one is due. Sending every
// session whenever one was added cost the member and the leader a
// lookup of every session per tick while a client created many: under
// CPU starvation, enough to make every keep-alive late.
func (k *clientKeeper) sendDue(now time.Time, force bool) time.Time {
	k.mu.Lock()
	// Only a regular keep-alive looks at every session (and sets the
	// interval from their TTLs): a tick between two carries the added and
	// urged ones alone, so a client holding many sessions does not walk
	// them all every tick. An Add lowers the interval at once.
	full := k.fresh || force || k.interval == 0 || !now.Before(k.nextDueLocked(k.interval))
	var ids []int64
	if full {
		interval := time.Duration(0)
		for id, s := range k.held.All() {
			if s.Manual() && !k.held.Urgent(id) {
				continue
			}
			ids = append(ids, id)
			if iv := s.TTL() / sessions.KeepAliveDivisor; interval == 0 || iv < interval {
				interval = iv
			}
		}
		k.interval = interval
	} else {
		for id := range k.added {
			if k.held.Has(id) {
				ids = append(ids, id)
			}
		}
		for id := range k.held.UrgentIDs() {
			if _, dup := k.added[id]; !dup && k.held.Has(id) {
				ids = append(ids, id)
			}
		}
	}
	k.fresh = false
	k.held.ClearUrgent()
	clear(k.added)
	next := k.nextDueLocked(k.interval)
	k.mu.Unlock()
	if len(ids) == 0 {
		if full {
			return now.Add(time.Hour)
		}
		return next
	}
	seq, ok := k.send(now, ids)
	if !ok {
		return now.Add(k.c.ElectionTimeout() / 4)
	}
	if !full {
		// The regular phase is set by regular keep-alives only.
		return next
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lastSeq, k.lastAt, k.ackAt = seq, now, time.Time{}
	return k.nextDueLocked(k.interval)
}

// nextDueLocked is when the next regular keep-alive is due. The member
// folds it into its next regular batch, one per interval (clientFold),
// so the client times it from the ack of the last: that ack left just
// after the member's batch, so the next keep-alive, sent an interval
// minus a lead later, reaches the member shortly before its next batch.
// The lead (three eighths of an election timeout) covers the member's
// batch leaving up to half a tick early and the round trips, and is less
// than the member's longest fold, so a client out of phase drifts into
// it. Until that ack arrives, the next is due an interval after the
// last: the ack may be late, but the cadence holds (the member retries
// with the leader itself, and a stalled member is left, see stalled).
// k.mu is held.
func (k *clientKeeper) nextDueLocked(interval time.Duration) time.Time {
	if k.lastAt.IsZero() {
		return time.Time{}
	}
	if k.ackAt.IsZero() {
		return k.lastAt.Add(interval)
	}
	return k.ackAt.Add(interval - 3*k.c.ElectionTimeout()/8)
}

// send sends one KeepAlive for ids and returns its sequence number.
func (k *clientKeeper) send(now time.Time, ids []int64) (uint64, bool) {
	k.c.mu.Lock()
	conn := k.c.conn
	k.c.mu.Unlock()
	if conn == nil {
		return 0, false
	}
	k.mu.Lock()
	seq := k.held.Sent(now, k.c.ElectionTimeout(), ids, struct{}{})
	if k.oldest.IsZero() {
		k.oldest = now
	}
	k.mu.Unlock()
	ka := &clientwire.KeepAlive{Seq: seq, SessionIDs: make([]int64, len(ids))}
	for i, id := range ids {
		ka.SessionIDs[i] = int64(id)
	}
	if err := conn.KeepAlive(ka); err != nil {
		return seq, false
	}
	k.sends.Add(1)
	k.ids.Add(int64(len(ids)))
	return seq, true
}

// onAck handles the member's ack (on the connection's reader: it must
// not block).
func (k *clientKeeper) onAck(a *clientwire.KeepAliveAck) {
	gone := make([]int64, len(a.Gone))
	for i, g := range a.Gone {
		gone[i] = g.ID
	}
	k.mu.Lock()
	b, alive, ended, ok := k.held.Answered(a.Seq, a.Confirmed, gone)
	if ok {
		// Everything sent up to this one has had its answer or never
		// will; the stall clock restarts with the next send.
		k.oldest = time.Time{}
		if a.Seq == k.lastSeq {
			k.ackAt = time.Now()
		}
	}
	var wake []chan struct{}
	for seq, ch := range k.waiters {
		if seq <= a.Seq {
			wake = append(wake, ch)
			delete(k.waiters, seq)
		}
	}
	k.mu.Unlock()
	for _, s := range alive {
		s.Confirmed(b.At)
	}
	for _, s := range ended {
		if s.End(errs.SessionExpired) == errs.SessionExpired {
			k.c.log.Info("session ended by the cell", "session", s.ID(), "ttl", s.TTL())
		}
	}
	for _, ch := range wake {
		close(ch)
	}
}

// checkLocal moves sessions into jeopardy or local expiry; a session
// that expired here is ended in the cell too (as its holder's own end:
// a client may not propose an expiry).
func (k *clientKeeper) checkLocal(now time.Time) {
	k.mu.Lock()
	local, gen := k.held.DueForCheck(now)
	k.mu.Unlock()
	if local == nil {
		return
	}
	next := spi.ExpiredHere(local, now, func(s *spi.Session) {
		k.c.log.Info("session expired here: no keep-alive confirmed in time", "session", s.ID(), "ttl", s.TTL())
		k.ProposeAsync(&command.Command{Kind: command.KindSessionEnd,
			Session: &command.Session{ID: s.ID()}})
	})
	k.mu.Lock()
	k.held.CheckedUntil(next, gen)
	k.mu.Unlock()
}

// renew has the next tick's keep-alive carry s and waits until one is
// confirmed, asking again every half election timeout (and after a move
// to another member). Renewals share that one message, as on a member: a
// message per renewal would flood the member when many sessions renew
// at once (a burst of slow creations).
func (k *clientKeeper) Renew(ctx context.Context, s *spi.Session) (time.Time, error) {
	return spi.RenewEvery(ctx, s, k.c.ElectionTimeout()/2, func() {
		k.mu.Lock()
		k.held.Urge(s.ID())
		k.mu.Unlock()
	}, k.c.life.Done(), errs.Closed)
}

// sync sends one keep-alive for every session (manual ones too) and
// waits, for ctx, until it is answered: afterwards every session the
// cell had ended when the leader heard it knows it has ended.
func (k *clientKeeper) sync(ctx context.Context) {
	k.mu.Lock()
	ids := k.held.IDs()
	k.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	seq, ok := k.send(time.Now(), ids)
	if !ok {
		return
	}
	ch := make(chan struct{})
	k.mu.Lock()
	k.waiters[seq] = ch
	k.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		k.mu.Lock()
		delete(k.waiters, seq)
		k.mu.Unlock()
	}
}

// ProposeAsync proposes cmd without waiting, bounded by two election
// timeouts; if it is lost the session expires in the cell anyway.
func (k *clientKeeper) ProposeAsync(cmd *command.Command) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return
	}
	k.pendingW.Go(func() {
		ctx, cancel := context.WithTimeout(k.c.life, 2*k.c.ElectionTimeout())
		defer cancel()
		_, _ = k.c.Propose(ctx, cmd)
	})
}

// close ends every session locally with errs.Closed, once the client's
// goroutines have stopped.
func (k *clientKeeper) close() {
	k.mu.Lock()
	k.closed = true
	local := k.held.Sessions()
	k.mu.Unlock()
	k.pendingW.Wait()
	for _, s := range local {
		s.End(errs.Closed)
	}
}

// Adopt starts keeping s alive, unless this client keeps a session of
// its ID already; it reports whether it did.
func (k *clientKeeper) Adopt(s *spi.Session) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.held.Has(s.ID()) {
		return false
	}
	k.addLocked(s)
	return true
}

// grantedTTL asks the client's member for the TTL the cell granted one of
// this client's sessions (the member's TimeToLive answer carries it); a
// member lost meanwhile is asked again through the next one. Another
// client's (or a member's) session is errs.Forbidden, one the cell has
// ended errs.SessionExpired.
func (k *clientKeeper) grantedTTL(ctx context.Context, id int64) (time.Duration, error) {
	var ttl time.Duration
	err := k.c.failover(ctx, passOn, func(conn *clientwire.ClientConn) (next, error) {
		res, err := conn.AskTimeToLive(ctx, int64(id))
		if err == nil {
			if res.TTL <= 0 {
				return nextAnswered, fmt.Errorf("%w: the client's member does not report a session's TTL, needed to resume it", errs.InvalidArgument)
			}
			ttl = res.TTL
			return nextAnswered, nil
		}
		return askedTTL(ctx, err, func(err error) error {
			return fmt.Errorf("%w: the client's member is too old to resume a session: %w", errs.InvalidArgument, err)
		})
	})
	return ttl, err
}

// timeToLive asks the client's member, which asks the leader; a member
// lost meanwhile is asked again through the next one.
func (k *clientKeeper) timeToLive(ctx context.Context, id int64) (time.Duration, error) {
	var left time.Duration
	err := k.c.failover(ctx, passOn, func(conn *clientwire.ClientConn) (next, error) {
		var err error
		if left, err = conn.TimeToLive(ctx, int64(id)); err == nil {
			return nextAnswered, nil
		}
		return askedTTL(ctx, err, func(err error) error {
			return fmt.Errorf("coord: the client's member is too old to report a time to live: %w", err)
		})
	})
	if err != nil {
		return 0, err
	}
	return left, nil
}

// askedTTL judges a member's failed answer to a question about a
// session's time to live: the member's refusal stands, as does one of a
// member too old to be asked (tooOld says so); a connection that ended,
// or a member closing, means asking the next one.
func askedTTL(ctx context.Context, err error, tooOld func(error) error) (next, error) {
	var we *clientwire.Error
	switch {
	case errors.As(err, &we) && !clientwire.MemberClosing(err):
		return nextAnswered, clientwire.ErrorOf(we.Code, we.Message)
	case errors.Is(err, clientwire.ErrVersion):
		return nextAnswered, tooOld(err)
	case ctx.Err() != nil:
		return nextAnswered, ctx.Err()
	}
	return nextMember, nil // the next current() waits for the next member
}

// passOn is a failover's giveUp that returns the error as it is.
func passOn(err error) error { return err }
