package scale

import (
	"context"
	"errors"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// quotaCheck tries writes at the cap, deletes, and a write after them.
func quotaCheck(ctx context.Context, m cell.Member, sc cell.Scaler, r QuotaCheck) (*QuotaResult, error) {
	if r.Writes < 0 || r.Writes > 100_000 || r.Deletes < 0 || r.Deletes > 1_000_000 || r.ValueSize < 0 || r.ValueSize > 1<<20 {
		return nil, errors.New("scale: quota check out of range")
	}
	val := value(r.ValueSize)
	res := &QuotaResult{Writes: r.Writes, Deletes: r.Deletes}
	for i := range r.Writes {
		pctx, cancel := context.WithTimeout(ctx, opLimit)
		_, err := sc.PutRev(pctx, Key(r.Prefix, r.WriteFrom+i), val)
		cancel()
		switch {
		case err == nil:
			res.WritesOK++
		case sc.QuotaRefused(err):
			res.WritesRefused++
			if res.RefusedError == "" {
				res.RefusedError = err.Error()
			}
		default:
			res.WritesOther++
			if res.OtherError == "" {
				res.OtherError = err.Error()
			}
		}
	}
	start := time.Now()
	keys := make([]string, 0, 100)
	for i := 0; i < r.Deletes; i += 100 {
		keys = keys[:0]
		for j := i; j < min(i+100, r.Deletes); j++ {
			keys = append(keys, Key(r.DeletePrefix, r.DeleteFrom+j))
		}
		dctx, cancel := context.WithTimeout(ctx, opLimit)
		err := sc.DeleteBatch(dctx, keys)
		cancel()
		if err != nil {
			res.DeleteError = err.Error()
			break
		}
		res.Deleted += len(keys)
	}
	res.DeleteSeconds = time.Since(start).Seconds()
	pctx, cancel := context.WithTimeout(ctx, opLimit)
	_, err := sc.PutRev(pctx, Key(r.Prefix, r.WriteFrom+r.Writes), val)
	cancel()
	switch {
	case err == nil:
		res.AfterDelete = "ok"
	case sc.QuotaRefused(err):
		res.AfterDelete = "refused"
	default:
		res.AfterDelete = err.Error()
	}
	gctx, cancel := context.WithTimeout(ctx, opLimit)
	err = m.Get(gctx, Key(r.DeletePrefix, r.DeleteFrom+r.Deletes), false)
	cancel()
	res.GetOK = err == nil
	if err != nil {
		res.GetError = err.Error()
	}
	return res, ctx.Err()
}
