package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// inflightLimit bounds each in-flight write: past it the bench gives up
// on the call (cell.ClassLimit), which a call that returns by itself
// never needs. It is longer than etcd's own request timeout (7 s at the
// default timings), so etcd's calls end by themselves too.
const inflightLimit = 30 * time.Second

// InflightOver is the slack the in-flight writes' p99 is allowed past the
// time to the first write after the stop (issue 23's target): a write in
// flight across a leader change completes within about a round trip of
// the new leader being known.
const InflightOver = 50 * time.Millisecond

// Inflight measures, for each of cfg.InflightStops on cfg.InflightCells
// fresh cells each, the writes in flight when the leader stops:
// cfg.InflightWriters writers on the two other members write one call
// after another (for cfg.Warmup), then the leader is stopped, and every
// write that had started and not ended by then is timed from the stop to
// its result, whether it succeeded or which error it ended with. Beside
// them, overlapping write attempts through the survivors, one every 2 ms
// from the stop as in Failover, give the time to the first write after
// the stop in the same cell. No writer starts a write after the stop, so
// the in-flight writes see only the load a failover has.
func Inflight(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	var out []Metric
	for _, mode := range cfg.InflightStops {
		var cells []InflightCell
		for r := range cfg.InflightCells {
			_, err := withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
				res, err := inflightCell(ctx, c, mode, cfg.InflightWriters, cfg.Warmup, cfg.ValueSize)
				if err != nil {
					return nil, err
				}
				env.log("in flight across a %s stop, cell %d: %s", mode, r+1, res)
				cells = append(cells, res)
				return nil, nil
			})
			if err != nil {
				return out, fmt.Errorf("in flight, %s, cell %d: %w", mode, r+1, err)
			}
		}
		out = append(out, InflightMetrics(mode, cfg.InflightWriters, cells)...)
	}
	return out, nil
}

// InflightCell is what one cell's in-flight writes did across a stop of
// its leader.
type InflightCell struct {
	// Lat holds, for every write in flight at the stop, the time from the
	// stop to its result.
	Lat []time.Duration
	// Errors counts those that ended in an error, by class.
	Errors map[cell.ErrorClass]int
	// Lead is the time from the stop until a survivor led (0: not
	// measured), Write until the first write started after the stop
	// succeeded.
	Lead, Write time.Duration
}

func (r InflightCell) String() string {
	s := sortedCopy(r.Lat)
	n := 0
	for _, c := range r.Errors {
		n += c
	}
	return fmt.Sprintf("%d in flight: p50 %v, p99 %v, max %v, %d errors %v; new leader %v, first write %v",
		len(s), percentile(s, 50).Round(time.Millisecond), percentile(s, 99).Round(time.Millisecond),
		percentile(s, 100).Round(time.Millisecond), n, r.Errors, r.Lead.Round(time.Millisecond), r.Write.Round(time.Millisecond))
}

// writeRecord is one write of an in-flight writer.
type writeRecord struct {
	start, end time.Time
	// class is the error's, "" when the write succeeded.
	class cell.ErrorClass
}

// accountInflight returns the writes in flight at t0 (started before it,
// not ended before it), each timed from t0 to its result, and their
// errors by class.
func accountInflight(t0 time.Time, recs []writeRecord) InflightCell {
	res := InflightCell{Errors: map[cell.ErrorClass]int{}}
	for _, w := range recs {
		if !w.start.Before(t0) || w.end.Before(t0) {
			continue
		}
		res.Lat = append(res.Lat, w.end.Sub(t0))
		if w.class != "" {
			res.Errors[w.class]++
		}
	}
	return res
}

// InflightMetrics returns the figures of the cells' in-flight writes
// across a mode stop: the writes pooled over the cells (how many, p50,
// p99 and max of the time from the stop to their result, errors in all
// and by class), the median time to a new leader and to the first write,
// and how far the p99 is past that first write.
func InflightMetrics(mode cell.StopMode, writers int, cells []InflightCell) []Metric {
	var lat, leads, writes []time.Duration
	errs := map[cell.ErrorClass]int{}
	total := 0
	for _, c := range cells {
		lat = append(lat, c.Lat...)
		if c.Lead > 0 {
			leads = append(leads, c.Lead)
		}
		writes = append(writes, c.Write)
		for cl, n := range c.Errors {
			errs[cl] += n
			total += n
		}
	}
	lat, leads, writes = sortedCopy(lat), sortedCopy(leads), sortedCopy(writes)
	name := "inflight." + string(mode)
	label := fmt.Sprintf("in-flight writes, %s stop (%d writers x %d cells)", mode, writers, len(cells))
	p99, first := percentile(lat, 99), percentile(writes, 50)
	out := []Metric{
		{Name: name + ".writes", Label: label + ": in flight at the stop", Unit: "writes", Value: float64(len(lat))},
		{Name: name + ".p50", Label: label + ": stop to result, p50", Unit: "ms", Value: ms(percentile(lat, 50))},
		{Name: name + ".p99", Label: label + ": stop to result, p99", Unit: "ms", Value: ms(p99)},
		{Name: name + ".max", Label: label + ": stop to result, max", Unit: "ms", Value: ms(percentile(lat, 100))},
		{Name: name + ".errors", Label: label + ": errors", Unit: "writes", Value: float64(total)},
	}
	for _, cl := range cell.ErrorClasses {
		out = append(out, Metric{Name: name + ".errors." + string(cl), Label: label + ": errors, " + string(cl),
			Unit: "writes", Value: float64(errs[cl]), OmitZero: true})
	}
	if len(leads) > 0 {
		out = append(out, Metric{Name: name + ".failover.leader", Label: label + ": stop to a new leader, median", Unit: "ms",
			Value: ms(percentile(leads, 50))})
	}
	out = append(out,
		Metric{Name: name + ".failover.write", Label: label + ": stop to the first write, median", Unit: "ms", Value: ms(first)},
		Metric{Name: name + ".over", Label: label + ": p99 past the first write", Unit: "ms", Value: ms(p99 - first)})
	return out
}

// inflightCell runs one cell's in-flight writes across a mode stop of its
// leader.
func inflightCell(ctx context.Context, c cell.Cell, mode cell.StopMode, writers int, warmup time.Duration, valueSize int) (InflightCell, error) {
	old := c.Leader()
	if old < 0 {
		return InflightCell{}, errors.New("no leader to stop")
	}
	var survivors []int
	for m := range cell.Members {
		if m != old {
			survivors = append(survivors, m)
		}
	}
	val := value(valueSize)
	ws := startWriters(ctx, writers, never, func(ctx context.Context, w, seq int) error {
		return c.Put(ctx, survivors[w%len(survivors)], inflightKey(0, w, seq), val)
	}, func(ctx context.Context, err error) cell.ErrorClass { return cell.Classify(ctx, c, err) })
	sleep(ctx, warmup)
	if l := c.Leader(); l != old {
		ws.halt()
		ws.wait()
		return InflightCell{}, fmt.Errorf("the leader moved from member %d to %d in the warm-up", old, l)
	}
	fctx, cancel := context.WithTimeout(ctx, failoverLimit)
	defer cancel()
	t0 := ws.halt()
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(fctx, old, mode) }()
	lead, write := awaitFailover(fctx, c, old, survivors, t0)
	recs := ws.wait()
	if err := <-stopped; err != nil {
		return InflightCell{}, fmt.Errorf("stop member %d: %w", old, err)
	}
	if lead == 0 || write == 0 {
		return InflightCell{}, fmt.Errorf("no new leader and write within %v", failoverLimit)
	}
	res := accountInflight(t0, recs)
	res.Lead, res.Write = lead, write
	return res, ctx.Err()
}

// never is a time after every write: writers that keep it remember only
// their last two writes.
var never = time.Unix(1<<62, 0)

// inflightKey is the key of writer w's seq-th write in member process p
// (0 in one process).
func inflightKey(p, w, seq int) string {
	return "bench/inflight/" + strconv.Itoa(p) + "/" + strconv.Itoa(w) + "/" + strconv.Itoa(seq%putKeysPerWorker)
}

// inflightWriters are writers writing one call after another until
// halted. Each remembers its last two writes, and every write that ended
// at or after keep: a write in flight at an instant after keep is among
// them. (With keep in the future, just the last two: the write a writer
// had in flight when halted, if it had one, is one of them, since it
// starts at most one more after the halt.)
type inflightWriters struct {
	stop atomic.Bool
	wg   sync.WaitGroup
	keep time.Time
	recs [][]writeRecord
}

// startWriters starts n writers calling put (with its writer number and
// a per-writer sequence number), each call bounded by inflightLimit, its
// error named by classify (given the call's context).
func startWriters(ctx context.Context, n int, keep time.Time, put func(ctx context.Context, w, seq int) error,
	classify func(ctx context.Context, err error) cell.ErrorClass) *inflightWriters {
	ws := &inflightWriters{keep: keep, recs: make([][]writeRecord, n)}
	for w := range n {
		ws.wg.Go(func() {
			for seq := 0; !ws.stop.Load() && ctx.Err() == nil; seq++ {
				wctx, cancel := context.WithTimeout(ctx, inflightLimit)
				rec := writeRecord{start: time.Now()}
				err := put(wctx, w, seq)
				rec.end = time.Now()
				if err != nil {
					rec.class = classify(wctx, err)
				}
				cancel()
				ws.add(w, rec)
			}
		})
	}
	return ws
}

// add records writer w's latest write, dropping its oldest when it has
// more than two and that one ended before keep.
func (ws *inflightWriters) add(w int, rec writeRecord) {
	r := append(ws.recs[w], rec)
	if len(r) > 2 && r[0].end.Before(ws.keep) {
		r = append(r[:0], r[1:]...)
	}
	ws.recs[w] = r
}

// halt stops the writers from starting writes and returns the instant
// before it did: a write started before it and not ended by it was in
// flight then.
func (ws *inflightWriters) halt() time.Time {
	t0 := time.Now()
	ws.stop.Store(true)
	return t0
}

// wait waits for every writer and returns the writes they remember.
func (ws *inflightWriters) wait() []writeRecord {
	ws.wg.Wait()
	var out []writeRecord
	for _, r := range ws.recs {
		out = append(out, r...)
	}
	return out
}
