package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordcell/coord"
	"github.com/coordcell/coord/internal/histcheck"
)

// kvWorker does puts, compare-and-sets and reads on the live keys until
// ctx ends: workers 0 to 2 through a client each, the others through a
// member drawn per call.
func (h *history) kvWorker(ctx context.Context, w int, rng *rand.Rand) {
	for seq := 0; ctx.Err() == nil; seq++ {
		// A call every 120 to 360 ms per worker: each write costs five
		// members an append and an apply; half the rate of 60 to 180 ms
		// (with the lock workers' pause) cut a third of a history's cost
		// under the race detector.
		time.Sleep(time.Duration(120+rng.IntN(240)) * time.Millisecond)
		var cell coord.Cell
		var node *coord.Node
		if w < len(h.cls) {
			cell = h.cls[w]
		} else if node = h.c.Node(rng.IntN(h.c.Size())); node != nil {
			cell = node
		} else {
			continue
		}
		in := histcheck.Input{Kind: histcheck.Kind(rng.IntN(3)), Key: h.keys.pick(rng),
			Value: fmt.Sprintf("w%d-%d", w, seq), Version: int64(rng.IntN(4))}
		opCtx, cancel := context.WithTimeout(context.Background(), opTimeout)
		call := time.Now()
		out, kv, keep, err := runOp(opCtx, cell, in)
		ret := time.Now()
		if out.Ambiguous && opCtx.Err() == nil && (node == nil || node.Err() == nil) {
			// Writes are exactly-once and resent (through the next member
			// for a client): only a call whose context or member ended may
			// not know what became of it.
			h.fail("worker %d: %v(%s) ended ambiguous with its context and member alive: %v", w, in.Kind, in.Key, err)
		}
		cancel()
		h.record(w, in, out, kv, keep, err, call, ret)
	}
}

func (h *history) record(w int, in histcheck.Input, out histcheck.Output, kv coord.KV, keep bool, err error, call, ret time.Time) {
	if out.Ambiguous {
		h.keys.ambiguous(in.Key)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done.ops++
	if out.Ambiguous {
		h.ambiguous[cause(err)]++
	}
	if err == nil && in.Kind != histcheck.Get && (in.Kind == histcheck.Put || out.OK) {
		h.done.writes++
		h.acked[putID{in.Key, kv.ModRev}] = true
	}
	if !keep {
		if in.Kind != histcheck.Get {
			h.dropped = append(h.dropped, fmt.Sprintf("[%d, %d] worker %d: %v %s=%s: %v",
				call.Sub(h.start).Microseconds(), ret.Sub(h.start).Microseconds(), w, in.Kind, in.Key, in.Value, err))
		}
		return
	}
	if err != nil {
		out.Err = err.Error()
	}
	end := ret.Sub(h.start).Microseconds()
	if out.Ambiguous {
		end = 1 << 62 // open to the end of the history
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: w, Input: in, Output: out,
		Call: call.Sub(h.start).Microseconds(), Return: end})
}

// runOp performs in on cell. keep is false when the call certainly
// changed nothing and read nothing (a failed read, a write refused before
// it reached the cell), so it stays out of the history.
func runOp(ctx context.Context, cell coord.Cell, in histcheck.Input) (out histcheck.Output, kv coord.KV, keep bool, err error) {
	switch in.Kind {
	case histcheck.Get:
		kv, err = cell.Get(ctx, in.Key)
		switch {
		case errors.Is(err, coord.ErrNotFound):
			return histcheck.Output{}, kv, true, err
		case err != nil:
			return histcheck.Output{}, kv, false, err
		}
		return histcheck.Output{Found: true, Value: string(kv.Value), Version: kv.Version}, kv, true, nil
	case histcheck.Put:
		kv, err = cell.Put(ctx, in.Key, []byte(in.Value))
		out, keep = writeOutcome(err, histcheck.Output{})
		return out, kv, keep, err
	default:
		kv, err = cell.Put(ctx, in.Key, []byte(in.Value), coord.IfVersion(in.Version))
		if errors.Is(err, coord.ErrConflict) {
			return histcheck.Output{}, kv, true, err
		}
		out, keep = writeOutcome(err, histcheck.Output{OK: true})
		return out, kv, keep, err
	}
}

// writeOutcome classifies a write's error: certainly applied, certainly
// not (left out), or unknown (open).
func writeOutcome(err error, ok histcheck.Output) (histcheck.Output, bool) {
	switch {
	case err == nil:
		return ok, true
	case errors.Is(err, coord.ErrAmbiguous):
		// First: an *AmbiguousError also wraps its cause, which may be
		// ErrClosed (the member stopped with the write in flight).
		return histcheck.Output{Ambiguous: true}, true
	case errors.Is(err, coord.ErrNoQuorum), errors.Is(err, coord.ErrClosed):
		return histcheck.Output{}, false
	default:
		return histcheck.Output{Ambiguous: true}, true
	}
}

// cause names the sentinel behind an ambiguous write, for the log.
func cause(err error) string {
	for _, s := range []error{context.DeadlineExceeded, context.Canceled, coord.ErrTimeout, coord.ErrOverloaded,
		coord.ErrNotLeader, coord.ErrInternal, coord.ErrAmbiguous} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return fmt.Sprint(err)
}

// lockWorker takes the lock "res" again and again through a session of
// its own (worker 0 and 1 through clients, 2 through a member), and
// writes under each hold's token through the fence, which admits a token
// only if no higher one has been.
func (h *history) lockWorker(ctx context.Context, w int, rng *rand.Rand) {
	for ctx.Err() == nil {
		var cell coord.Cell
		if w < 2 {
			cell = h.cls[w%len(h.cls)]
		} else if n := h.c.Node(rng.IntN(h.c.Size())); n != nil {
			cell = n
		} else {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, opTimeout)
		s, err := cell.NewSession(sctx, coord.WithTTL(2*cell.MinSessionTTL()))
		cancel()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		m := coord.NewMutex(s, "res")
		for ctx.Err() == nil && s.Err() == nil {
			lctx, cancel := context.WithTimeout(ctx, opTimeout)
			tok, err := m.Lock(lctx)
			cancel()
			if err != nil {
				// Virtual time stands still while any goroutine runs: a
				// call that fails at once must not be retried at once.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			h.admit(w, tok)
			time.Sleep(time.Duration(5+rng.IntN(40)) * time.Millisecond)
			uctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			_ = m.Unlock(uctx)
			cancel()
			// A moment between holds, so that three workers contend
			// without taking the lock a dozen times a second: a hold is
			// three or four writes, and at a pause of 60 to 120 ms the
			// holds were most of a history's writes and half its cost
			// under the race detector (about 100 holds a history now).
			time.Sleep(time.Duration(200+rng.IntN(200)) * time.Millisecond)
		}
		cctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_ = s.Close(cctx)
		cancel()
	}
}

// admit passes a hold's token through the fence and checks, atomically
// with it, that no other hold had the same token and that no token is
// admitted after a higher one.
func (h *history) admit(w int, tok coord.Token) {
	if v := h.admitLocked(w, tok); v != "" {
		h.fail("%s", v)
	}
}

// admitLocked is admit under h.mu; it returns the violation, if any.
func (h *history) admitLocked(w int, tok coord.Token) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done.holds++
	if other, dup := h.holds[tok]; dup {
		return fmt.Sprintf("lock worker %d was granted token %d, already granted to a hold of worker %d", w, tok, other)
	}
	h.holds[tok] = w
	if err := h.fence.Admit("res", tok); err != nil {
		return "" // a newer holder wrote first: the fence did its work
	}
	if tok < h.admitted {
		return fmt.Sprintf("the fence admitted token %d after %d", tok, h.admitted)
	}
	h.admitted = tok
	return ""
}
