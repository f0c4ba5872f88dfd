package coord

import (
	"context"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/sessions"
)

// Clients' keep-alives are folded into this member's own batched
// keep-alive to the leader: a client sends one KeepAlive per interval for
// all its sessions, the member adds their IDs to the next batch it sends
// (one message per interval, whatever the number of clients), and the
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

// clientFold holds the client sessions folded since the last batch. It
// is guarded by the engine's mu.
type clientFold struct {
	pend    map[SessionID]time.Duration // session → its TTL
	waiters []*clientWaiter
	urgent  bool                  // a waiter went unanswered: send at the next tick
	known   map[SessionID]knownID // client sessions this member sent lately
}

type knownID struct {
	at  time.Time
	ttl time.Duration
}

// clientWaiter is one client keep-alive waiting for the ack of the batch
// its IDs went out in.
type clientWaiter struct {
	done chan *sessions.Ack // buffered: the ack is never waited for
}

func (f *clientFold) init() {
	f.pend = make(map[SessionID]time.Duration)
	f.known = make(map[SessionID]knownID)
}

// due reports what the folded sessions ask of the next batch: their IDs,
// the interval they need (TTL/KeepAliveDivisor), and whether the batch
// should go at once: a session this member has not sent lately (new, or
// its client just moved here), or a client left waiting too long. In
// steady state a client's sessions ride the member's regular interval.
func (f *clientFold) due(now time.Time) (ids []SessionID, interval time.Duration, fresh bool) {
	interval = time.Duration(1<<63 - 1)
	fresh = f.urgent
	for id, ttl := range f.pend {
		ids = append(ids, id)
		interval = min(interval, ttl/sessions.KeepAliveDivisor)
		if k, ok := f.known[id]; !ok || now.Sub(k.at) > 2*ttl/sessions.KeepAliveDivisor {
			fresh = true
		}
	}
	return ids, interval, fresh
}

// take empties the fold into a batch composed now.
func (f *clientFold) take(now time.Time) ([]SessionID, []*clientWaiter) {
	ids := make([]SessionID, 0, len(f.pend))
	for id, ttl := range f.pend {
		ids = append(ids, id)
		f.known[id] = knownID{at: now, ttl: ttl}
	}
	for id, k := range f.known {
		if now.Sub(k.at) > 2*k.ttl {
			delete(f.known, id) // its client went quiet or away
		}
	}
	w := f.waiters
	clear(f.pend)
	f.waiters, f.urgent = nil, false
	return ids, w
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

// foldClient adds a client's sessions (each with its TTL) to the next
// batch and returns where that batch's ack arrives. urgent makes the
// batch go at the next tick rather than at the member's interval.
func (e *sessionEngine) foldClient(ids map[SessionID]time.Duration, urgent bool) *clientWaiter {
	w := &clientWaiter{done: make(chan *sessions.Ack, 1)}
	e.mu.Lock()
	for id, ttl := range ids {
		e.clients.pend[id] = ttl
	}
	e.clients.waiters = append(e.clients.waiters, w)
	e.clients.urgent = e.clients.urgent || urgent
	e.mu.Unlock()
	return w
}

// keepClientsAlive folds owned (the client's sessions, with their TTLs)
// into this member's batches until the leader acks one, and answers
// which are confirmed and which are gone. A batch whose ack does not
// come within its interval and half an election timeout (a lost message,
// a leader change) is retried in the next one, at once.
func (e *sessionEngine) keepClientsAlive(ctx context.Context, owned map[SessionID]time.Duration, ack *clientwire.KeepAliveAck) error {
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
			return ErrClosed
		case <-t.C:
			urgent = true
			t.Reset(e.et / 2)
		}
	}
}
