package sessions

// The leader's side of lock-delay: a session expiry that ended a lock's
// hold left a marker under the lock's queue (see storage's lockdelay.go),
// and the marker blocks every grant of that lock until this side deletes
// it, a full delay after it first saw the marker. A new leader sees every
// marker for the first time once its table is loaded, after its
// election, so a change of leader only ever lengthens a delay. The delete
// carries the term, as expiries do, so a deposed leader's never applies.

import (
	"context"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// LockDelay is a lock-delay marker in the replicated state.
type LockDelay struct {
	Key       string
	CreateRev int64 // the marker's create revision: the delete is guarded by it
	Delay     time.Duration
}

// LockDelayCell is what the leader's side needs of its member to end
// lock-delays; a Cell that does not implement it has none.
type LockDelayCell interface {
	// LockDelays lists the markers in the applied state.
	LockDelays() ([]LockDelay, error)
	// SessionLockDelayed reports whether the session owns, in the
	// applied state, a lock key that asks for a lock-delay: its expiry
	// is then proposed with command.Session.LockDelay, which makes the
	// state machine leave the markers.
	SessionLockDelayed(id int64) bool
}

// lockDelayed reports whether the expiry of session id must carry the
// lock-delay flag. A key the session adds between this look and the
// expiry's apply gets no delay: a session past its deadline here has a
// holder the cell has not heard from for its whole TTL.
func (l *Leader) lockDelayed(id int64) bool {
	dc, ok := l.cfg.Cell.(LockDelayCell)
	return ok && dc.SessionLockDelayed(id)
}

// armed is one marker this leader is timing.
type armed struct {
	rev      int64
	deadline time.Time
	inFlight bool // its delete is being proposed
}

// tickLockDelays arms the markers it sees for the first time, forgets the
// ones gone, and proposes the delete of those whose delay has passed.
func (l *Leader) tickLockDelays(now time.Time) {
	dc, ok := l.cfg.Cell.(LockDelayCell)
	if !ok {
		return
	}
	list, err := dc.LockDelays()
	if err != nil {
		return
	}
	var due []LockDelay
	l.mu.Lock()
	if l.stopped || !l.ready {
		l.mu.Unlock()
		return
	}
	if len(list) == 0 && len(l.delays) == 0 {
		l.mu.Unlock()
		return
	}
	if l.delays == nil {
		l.delays = make(map[string]*armed)
	}
	seen := make(map[string]bool, len(list))
	for _, d := range list {
		seen[d.Key] = true
		a, ok := l.delays[d.Key]
		if !ok || a.rev != d.CreateRev {
			a = &armed{rev: d.CreateRev, deadline: now.Add(d.Delay)}
			l.delays[d.Key] = a
		}
		if !a.inFlight && !now.Before(a.deadline) {
			a.inFlight = true
			due = append(due, d)
		}
	}
	for k := range l.delays {
		if !seen[k] {
			delete(l.delays, k)
		}
	}
	l.mu.Unlock()
	for _, d := range due {
		l.endLockDelay(d)
	}
}

// endLockDelay proposes the delete of a marker whose delay has passed,
// guarded by its create revision so a newer marker of the same name
// stays. If it does not apply, the next tick tries again.
func (l *Leader) endLockDelay(d LockDelay) {
	retry := func() {
		l.mu.Lock()
		if a, ok := l.delays[d.Key]; ok && a.rev == d.CreateRev {
			a.inFlight = false
		}
		l.mu.Unlock()
	}
	ok := l.spawn(func() {
		ctx, cancel := context.WithTimeout(l.ctx, 2*l.et)
		defer cancel()
		res, err := l.cfg.Cell.Propose(ctx, &command.Command{Kind: command.KindTxn,
			Txn: &command.Txn{
				If:   []command.Compare{{Key: d.Key, Target: command.TargetCreateRev, Op: command.Equal, Int: d.CreateRev}},
				Then: []command.Op{{Type: command.OpDelete, Key: d.Key}},
			},
			Session: &command.Session{Term: l.cfg.Term}})
		if err != nil || res.Status != command.StatusOK {
			retry()
			return
		}
		if res.Succeeded {
			l.cfg.Logger.Info("lock-delay ended", "marker", d.Key, "delay", d.Delay, "term", l.cfg.Term)
		}
	})
	if !ok {
		retry()
	}
}
