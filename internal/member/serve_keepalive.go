package member

import (
	"context"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/sessions"
)

// Clients' keep-alives are folded into this member's own batched
// keep-alive to the leader: a client sends one KeepAlive per interval for
// all its sessions, the member adds their IDs to its next batch (one
// message per interval, whatever the number of clients; see clientFold
// for the cadence), and the
// leader's ack of that batch answers every client folded into it. No log
// entry is written for any of it, as for a member's own sessions.
//
// Why a client may count its session alive until its own send time plus
// the TTL (minus its margin), the conservative Until:
//
//  1. the client stamps its KeepAlive with its send time c, before the
//     bytes leave it, so the member receives it at some m ≥ c;
//  2. the IDs are taken into a batch only when the batch is composed
//     (clientFold.take), so a batch that confirms them was sent at b ≥ m;
//     a batch sent before they arrived never carries them;
//  3. the leader that acks the batch holds each session alive until at
//     least b + TTL, and a successor grants at least TTL from the send of
//     every keep-alive a leader acknowledged (keepalive.go);
//  4. so the cell's deadline is ≥ b + TTL ≥ c + TTL, and the client's
//     margin covers the clock-rate difference, as on a member.

// clientFold holds the clients' keep-alives folded since the batch that
// last carried them. It is guarded by the engine's mu.
//
// Cadence: a folded keep-alive rides the member's next regular batch
// (one per interval, whatever the number of clients), unless it would
// wait longer than an eighth of an election timeout: then the member
// sends an early batch carrying only the keep-alives that waited that
// long. Clients time their next keep-alive from the ack of the last
// (clientKeeper.nextDue), so they arrive just before the member's next
// regular batch and stay in its phase; one that arrives out of phase is
// answered by an early batch and drifts into phase within a few
// intervals (each early answer comes sooner than the client's lead, so
// its next arrival is earlier in the member's interval, until a regular
// batch takes it). The member's regular phase is set only by regular
// batches, so early ones never pull the clients already in phase.
//
// The longest wait is thus an eighth of an election timeout and a tick
// (three eighths), under the half election timeout of slack the leader
// gives a session before it counts it silent (sessions.Table.silentAt):
// a client out of phase is heard as regularly as a member's own session.
// Waiting up to half an interval, as this member once did, had the
// leader hear such a client's sessions up to half an interval late, and
// write a silence mark and a seen mark for each of them every time.
type clientFold struct {
	waiters []*clientWaiter
	known   map[int64]knownID // client sessions this member sent lately
}

type knownID struct {
	at  time.Time
	ttl time.Duration
}

// clientWaiter is one client keep-alive waiting for the batch that
// carries it, and then for that batch's ack.
type clientWaiter struct {
	ids    map[int64]time.Duration // session → its TTL
	at     time.Time               // when it was folded
	urgent bool                    // a retry: its last batch went unanswered
	done   chan *sessions.Ack      // buffered: the ack is never waited for
}

func (f *clientFold) init() {
	f.known = make(map[int64]knownID)
}

// interval is the keep-alive interval w's sessions need.
func (w *clientWaiter) interval() time.Duration {
	iv := time.Duration(1<<63 - 1)
	for _, ttl := range w.ids {
		iv = min(iv, ttl/sessions.KeepAliveDivisor)
	}
	return iv
}

// early reports whether w should go before the member's next regular
// batch: it is a retry, it carries a session this member has not sent
// lately (new, or its client just moved here), or it has waited an
// eighth of an election timeout.
func (f *clientFold) early(w *clientWaiter, now time.Time, et time.Duration) bool {
	if w.urgent || now.Sub(w.at) >= et/8 {
		return true
	}
	for id, ttl := range w.ids {
		if k, ok := f.known[id]; !ok || now.Sub(k.at) > 2*ttl/sessions.KeepAliveDivisor {
			return true
		}
	}
	return false
}

// due reports what the folded keep-alives ask of the batches: whether any
// is waiting, the interval they need, and whether any should go early.
func (f *clientFold) due(now time.Time, et time.Duration) (pending bool, interval time.Duration, early bool) {
	interval = time.Duration(1<<63 - 1)
	for _, w := range f.waiters {
		interval = min(interval, w.interval())
		early = early || f.early(w, now, et)
	}
	return len(f.waiters) > 0, interval, early
}

// take removes from the fold the keep-alives for a batch composed now
// (all of them for a regular batch, only the early ones otherwise) and
// returns their session IDs.
func (f *clientFold) take(now time.Time, et time.Duration, all bool) ([]int64, []*clientWaiter) {
	var taken, kept []*clientWaiter
	for _, w := range f.waiters {
		if all || f.early(w, now, et) {
			taken = append(taken, w)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
	seen := make(map[int64]bool)
	var ids []int64
	for _, w := range taken {
		for id, ttl := range w.ids {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
			f.known[id] = knownID{at: now, ttl: ttl}
		}
	}
	for id, k := range f.known {
		if now.Sub(k.at) > 2*k.ttl {
			delete(f.known, id) // its client went quiet or away
		}
	}
	return ids, taken
}

// answerClients hands a batch's ack to the client keep-alives folded
// into it.
func answerClients(ws []*clientWaiter, a *sessions.Ack) {
	for _, w := range ws {
		select {
		case w.done <- a:
		default:
		}
	}
}

// foldClient adds a client's sessions (each with its TTL) to the fold
// and returns where the ack of the batch that carries them arrives.
// urgent makes that batch go at the next tick.
func (e *sessionEngine) foldClient(ids map[int64]time.Duration, urgent bool) *clientWaiter {
	w := &clientWaiter{ids: ids, at: time.Now(), urgent: urgent, done: make(chan *sessions.Ack, 1)}
	e.mu.Lock()
	e.clients.waiters = append(e.clients.waiters, w)
	e.mu.Unlock()
	return w
}

// keepClientsAlive folds owned (the client's sessions, with their TTLs)
// into this member's batches until the leader acks one, and answers
// which are confirmed and which are gone. A batch whose ack does not
// come within its interval and half an election timeout (a lost message,
// a leader change) is retried in the next one, at once.
func (e *sessionEngine) keepClientsAlive(ctx context.Context, owned map[int64]time.Duration, ack *clientwire.KeepAliveAck) error {
	wait := e.et / 2
	for _, ttl := range owned {
		wait = max(wait, ttl/sessions.KeepAliveDivisor+e.et/2)
	}
	urgent := false
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		w := e.foldClient(owned, urgent)
		select {
		case a := <-w.done:
			alive := make(map[int64]bool, len(a.Alive)+len(a.Gone))
			for _, id := range a.Alive {
				alive[id] = true
			}
			for _, id := range a.Gone {
				alive[id] = false
			}
			for id := range owned {
				ok, heard := alive[int64(id)]
				switch {
				case ok:
					ack.Confirmed = append(ack.Confirmed, int64(id))
				case heard:
					ack.Gone = append(ack.Gone, clientwire.Gone{ID: int64(id), Code: clientwire.CodeSessionExpired})
				}
				// A session the ack does not mention is neither: the
				// client hears of it in its next keep-alive.
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-e.life.Done():
			return errs.Closed
		case <-t.C:
			urgent = true
			t.Reset(e.et / 2)
		}
	}
}
