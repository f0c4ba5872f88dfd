package coord

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/coordcell/coord/internal/lockq"
)

// LockReport is one lock as the cell holds it: its queue of waiters in
// grant order. For a Mutex or a Lease the first entry holds the lock;
// for an RWMutex or a Semaphore several may. While LockDelay is set, no
// entry holds it: every entry waits for the delay to end.
type LockReport struct {
	Name string `json:"name"`
	// Held is whether the first entry of Queue (or, for an RWMutex or a
	// Semaphore, the first few) holds the lock: false while the queue is
	// empty or the lock is in lock-delay.
	Held  bool          `json:"held"`
	Queue []QueueReport `json:"queue"`
	// LockDelay is the lock's lock-delay marker, when it has one: its
	// holder's session expired (WithLockDelay) and the cell grants the
	// lock to nobody until the marker is removed after the delay.
	LockDelay *LockDelayReport `json:"lock_delay,omitempty"`
}

// LockDelayReport is a lock-delay marker: a key the cell wrote under the
// lock's queue, with no session, when the holder's session expired.
type LockDelayReport struct {
	Key string `json:"key"`
	// Delay is how long after the expiry the lock stays ungranted.
	Delay time.Duration `json:"delay"`
	// Revision is the expiry's, at which the marker was written: the
	// delay runs from the time the leader applied it.
	Revision int64 `json:"revision"`
}

// QueueReport is one waiter (or holder) of a lock or an election.
type QueueReport struct {
	Key       string    `json:"key"`
	Session   SessionID `json:"session"`
	Token     Token     `json:"token"` // the fencing token it holds, or will
	Value     string    `json:"value,omitempty"`
	CreateRev int64     `json:"create_revision"`
}

// ElectionReport is one election group: its leader (the first
// candidate) and the candidates queued behind it.
type ElectionReport struct {
	Group      string        `json:"group"`
	Candidates []QueueReport `json:"candidates"`
}

// SessionReport is one live session as the cell records it.
type SessionReport struct {
	ID  SessionID     `json:"id"`
	TTL time.Duration `json:"ttl"`
	// Unheard is how long leaders have held office without hearing from
	// the session since one last did; it expires once this passes TTL.
	Unheard time.Duration `json:"unheard"`
	// Keys counts the ephemeral keys it owns (lock waits, candidacies).
	Keys int `json:"keys"`
}

// inspection is what the HTML page and the admin API show of the cell.
type inspection struct {
	Status    StatusReport
	Locks     []LockReport
	Elections []ElectionReport
	Sessions  []SessionReport
	Revision  int64
	Err       string
	Generated time.Time
}

// inspect reads the cell's locks, elections and sessions from this
// member's applied state (serializable: the page must work on a member
// that lost the leader, which is when an operator needs it most).
func (n *Node) inspect(ctx context.Context, opts ...ReadOption) inspection {
	in := inspection{Status: n.statusReport(ctx), Generated: time.Now()}
	all, rev, err := n.List(ctx, "", opts...)
	if err != nil {
		in.Err = err.Error()
		return in
	}
	in.Revision = rev
	in.Locks, in.Elections = queuesOf(all)
	owned := map[SessionID]int{}
	for _, kv := range all {
		if kv.Session != 0 {
			owned[kv.Session]++
		}
	}
	if ss, err := n.sm.Sessions(); err == nil {
		for _, s := range ss {
			id := SessionID(s.ID)
			in.Sessions = append(in.Sessions, SessionReport{ID: id, TTL: time.Duration(s.TTL),
				Unheard: time.Duration(s.Unheard), Keys: owned[id]})
		}
	}
	return in
}

// queuesOf groups the keys under locks/ and elections/ into queues. A
// queue key is {prefix}{name}/{waiter}; the name is what lies before the
// last slash, since names may hold slashes and waiter suffixes do not.
// A lock-delay marker is not a waiter: it is reported as the lock's
// LockDelay (a key of a session is never taken for one, whatever its
// name).
func queuesOf(kvs []KV) ([]LockReport, []ElectionReport) {
	locks := map[string][]QueueReport{}
	elections := map[string][]QueueReport{}
	delays := map[string]*LockDelayReport{}
	for _, kv := range kvs {
		name, election, ok := lockq.QueueName(kv.Key)
		if !ok {
			continue
		}
		into := locks
		if election {
			into = elections
		}
		if !election && kv.Session == 0 && lockq.IsDelayMarker(kv.Key) {
			// An invalid value counts as the longest delay, as the
			// sessions leader treats it: it still ends.
			d := lockq.MarkerDelay(kv.Value)
			// Several markers (written by successive expiries) block
			// alike; the latest ends last, so it is the one shown.
			if m := delays[name]; m == nil || kv.CreateRev > m.Revision {
				delays[name] = &LockDelayReport{Key: kv.Key, Delay: d, Revision: kv.CreateRev}
			}
			continue
		}
		q := QueueReport{Key: kv.Key, Session: kv.Session, Token: Token(kv.CreateRev), CreateRev: kv.CreateRev}
		if election {
			// A lock waiter's value is the recipe's own marker; a
			// candidate's is what it proclaimed.
			q.Value = string(kv.Value)
		}
		into[name] = append(into[name], q)
	}
	var lr []LockReport
	for name, q := range locks {
		lr = append(lr, LockReport{Name: name, Held: delays[name] == nil, Queue: sortQueue(q), LockDelay: delays[name]})
	}
	for name, d := range delays {
		if _, ok := locks[name]; !ok {
			lr = append(lr, LockReport{Name: name, Queue: []QueueReport{}, LockDelay: d})
		}
	}
	slices.SortFunc(lr, func(a, b LockReport) int { return cmp.Compare(a.Name, b.Name) })
	var er []ElectionReport
	for g, q := range elections {
		er = append(er, ElectionReport{Group: g, Candidates: sortQueue(q)})
	}
	slices.SortFunc(er, func(a, b ElectionReport) int { return cmp.Compare(a.Group, b.Group) })
	return lr, er
}

func sortQueue(q []QueueReport) []QueueReport {
	slices.SortFunc(q, func(a, b QueueReport) int { return cmp.Compare(a.CreateRev, b.CreateRev) })
	return q
}
