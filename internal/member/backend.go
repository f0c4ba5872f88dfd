package member

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/internal/watch"
	"github.com/coordcell/coord/storage"
)

// memberBackend is a member as the Cell API sees it (spi.Backend): its
// own Raft node and applied state.
type memberBackend struct{ n *Node }

var _ spi.Backend = memberBackend{}

// Backend is the member as the Cell API's backend.
func (n *Node) Backend() spi.Backend { return memberBackend{n} }

func (m memberBackend) Propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	return m.n.propose(ctx, cmd)
}

func (m memberBackend) Get(ctx context.Context, key string, o spi.ReadOptions) (command.KV, bool, error) {
	n := m.n
	if o.Ranged() {
		o.End = key + "\x00" // the key alone
		kvs, _, err := n.rangeRead(ctx, key, o, n.maxReadBytes())
		if err != nil || len(kvs) == 0 {
			return command.KV{}, false, err
		}
		return kvs[0], true, nil
	}
	if err := n.readBarrier(ctx, o); err != nil {
		return command.KV{}, false, err
	}
	kv, ok, err := n.sm.Get(key)
	if err != nil {
		return command.KV{}, false, n.stateErr(err)
	}
	return kv, ok, nil
}

func (m memberBackend) List(ctx context.Context, prefix string, o spi.ReadOptions) ([]command.KV, int64, error) {
	if o.Ranged() {
		return m.n.rangeRead(ctx, prefix, o, m.n.maxReadBytes())
	}
	return m.n.listPage(ctx, prefix, o, m.n.maxReadBytes())
}

func (m memberBackend) Watch(ctx context.Context, prefix string, o spi.WatchOptions, sink spi.Sink) {
	m.n.watch(ctx, prefix, o, sink)
}

func (m memberBackend) Settle(ctx context.Context) { m.n.settle(ctx) }

func (m memberBackend) ElectionTimeout() time.Duration { return m.n.electionTimeout() }

func (m memberBackend) Limits() spi.Limits { return m.n.inputLimits() }

// memberWatchBuffer is a member's watch channel: the hub hands it a
// revision's events at once, up to this many, without waiting on the
// consumer.
const memberWatchBuffer = 64

func (m memberBackend) WatchBuffer() int { return memberWatchBuffer }

func (m memberBackend) Keeper() spi.Keeper { return m.n.sessions }

func (m memberBackend) Probes() *spi.Probes { return &m.n.probes }

func (m memberBackend) Stats() *spi.SessionStats { return &m.n.sessionStats }

func (m memberBackend) Resumable(ctx context.Context, id int64) (time.Duration, int64, error) {
	n := m.n
	// A linearizable look: a session the state does not have after the
	// read barrier has ended (IDs are log indexes, never reused).
	if err := n.readBarrier(ctx, spi.ReadOptions{}); err != nil {
		return 0, 0, err
	}
	info, found, err := n.sm.Session(id)
	if err != nil {
		return 0, 0, n.stateErr(err)
	}
	rev := n.sm.Revision()
	switch {
	case !found:
		return 0, 0, fmt.Errorf("%w: session %d is not alive in the cell", errs.SessionExpired, id)
	case info.Owner != "":
		return 0, 0, fmt.Errorf("%w: session %d belongs to %s: only it may resume it", errs.InvalidArgument, id, info.Owner)
	}
	return time.Duration(info.TTL), rev, nil
}

func (m memberBackend) TimeToLive(ctx context.Context, id int64) (time.Duration, error) {
	return m.n.sessions.timeToLive(ctx, id)
}

// inputLimits are the member's input limits, from its Config.
func (n *Node) inputLimits() spi.Limits {
	return spi.Limits{MaxKey: n.cfg.MaxKeySize, MaxValue: n.cfg.MaxValueSize, MaxTxnOps: n.cfg.MaxTxnOps,
		MaxSessionTTL: n.cfg.MaxSessionTTL}
}

// maxReadBytes is Config.MaxReadBytes, as the storage counts reads.
func (n *Node) maxReadBytes() int64 { return int64(n.cfg.MaxReadBytes) }

func (n *Node) electionTimeout() time.Duration {
	return time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
}

// minSessionTTL is the shortest session TTL this member accepts.
func (n *Node) minSessionTTL() time.Duration { return spi.MinSessionTTL(n.electionTimeout()) }

// checkSessionTTL refuses, and counts, a TTL this member does not accept.
func (n *Node) checkSessionTTL(ttl time.Duration) error {
	err := spi.CheckSessionTTL(ttl, n.minSessionTTL(), n.cfg.MaxSessionTTL)
	if err != nil {
		n.sessionStats.RefusedTTL.Add(1)
	}
	return err
}

// listPage reads the page o asks for of prefix, at most maxBytes of it:
// Node.List's and a client's List alike.
func (n *Node) listPage(ctx context.Context, prefix string, o spi.ReadOptions, maxBytes int64) ([]command.KV, int64, error) {
	if err := n.readBarrier(ctx, o); err != nil {
		return nil, 0, err
	}
	kvs, rev, err := n.sm.ListPage(prefix, storage.Page{After: o.After, Limit: o.Limit, MaxBytes: maxBytes})
	if errors.Is(err, errs.ReadTooLarge) {
		return nil, 0, fmt.Errorf("List(%q): %w; page it with Limit and After (or raise Config.MaxReadBytes)", prefix, err)
	}
	if err != nil {
		return nil, 0, n.stateErr(err)
	}
	return kvs, rev, nil
}

// rangeRead serves a ranged read (spi.ReadOptions.Ranged) of key, the
// start of o.End's range or, without one, a prefix: Node.Get's and
// List's and a client's alike, at most maxBytes. It fills o.Counted.
func (n *Node) rangeRead(ctx context.Context, key string, o spi.ReadOptions, maxBytes int64) ([]command.KV, int64, error) {
	if err := n.readBarrier(ctx, o); err != nil {
		return nil, 0, err
	}
	r := storage.RangeRead{Start: key, End: o.End, After: o.After, Limit: o.Limit, MaxBytes: maxBytes, Rev: o.Rev,
		KeysOnly: o.KeysOnly, CountOnly: o.CountOnly, Count: o.Counted != nil,
		Sort: storage.SortTarget(o.SortTarget), Descend: o.SortDescend,
		MinModRev: o.MinModRev, MaxModRev: o.MaxModRev, MinCreateRev: o.MinCreateRev, MaxCreateRev: o.MaxCreateRev}
	if r.End == "" {
		r.End = storage.NoEnd
		if end := spi.PrefixEnd(key); end != "" {
			r.End = end
		}
	}
	res, err := n.sm.Range(r)
	var ce *storage.CompactedError
	switch {
	case errors.As(err, &ce):
		return nil, 0, &spi.CompactedError{Oldest: ce.Oldest}
	case errors.Is(err, errs.ReadTooLarge):
		return nil, 0, fmt.Errorf("read of %q: %w; page it with Limit and After, read a nearer revision "+
			"(or raise Config.MaxReadBytes)", key, err)
	case errors.Is(err, errs.FutureRev):
		return nil, 0, err
	case err != nil:
		return nil, 0, n.stateErr(err)
	}
	if o.Counted != nil {
		*o.Counted = res.Count
	}
	return res.KVs, res.Rev, nil
}

// settle waits until everything this member has applied so far has also
// been handed to its listeners (the watch hub and the sessions), so a
// session ended by a change a watcher has seen knows it has ended.
func (n *Node) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, n.electionTimeout())
	defer cancel()
	_ = n.raft.WaitApplied(ctx, n.sm.AppliedIndex())
}

// watch serves a watch from this member's applied state into sink.
func (n *Node) watch(ctx context.Context, prefix string, o spi.WatchOptions, sink spi.Sink) {
	if !o.FromSet {
		o.FromRev = n.sm.Revision()
	}
	if !o.MaxLagSet {
		o.MaxLag = n.cfg.HistoryRevisions / 2
	}
	ctx, cancel := context.WithCancel(ctx)
	// The watch also ends when the node closes.
	stop := context.AfterFunc(n.closing, cancel)
	sink.SetLastRev(o.FromRev)
	em := &emitter{w: sink, o: &o, hub: n.hub}
	// The watch is established once the hub has read from the start
	// revision without finding it compacted: its first event, or, on a
	// quiet prefix, the progress report asked for here (which the
	// emitter keeps to itself unless the caller asked for one too).
	sink.ProgressRequests() <- struct{}{}
	// No goroutine waits with the watch (watch.Hub.Start): the caller's
	// progress requests reach it through the sink's hook.
	sub := n.hub.Start(ctx, prefix, o.FromRev, o.Progress, em, nil, func(err error) {
		stop()
		cancel()
		if n.closing.Err() != nil && !errors.As(err, new(*watch.SlowError)) {
			err = errs.Closed
		}
		sink.End(err)
	})
	sink.OnProgressRequest(sub.RequestProgress)
}

// emitter turns the hub's events into the watcher's: filtered, with or
// without the previous state, a revision's events released together.
type emitter struct {
	w       spi.Sink
	o       *spi.WatchOptions
	hub     *watch.Hub
	pending []spi.Event
	lag     *time.Ticker
	ready   bool // Ready's channel is closed
	ownDone bool // the first progress report, watch's own request, is past
}

func (e *emitter) Event(ctx context.Context, rev int64, ev *storage.Event, end bool) error {
	e.established()
	t := spi.EventPut
	if ev.Type == storage.EventDelete {
		t = spi.EventDelete
	}
	if e.o.Wants(t) && e.o.Admits(ev.KV.Key) {
		out := spi.Event{Type: t, KV: ev.KV, Rev: rev}
		if e.o.PrevKV {
			out.PrevKV = ev.Prev
		}
		e.pending = append(e.pending, out)
	}
	if !end {
		return nil
	}
	for i := range e.pending {
		e.pending[i].EndOfRev = i == len(e.pending)-1
		// Only between revisions may the watch end for being slow, so
		// LastRev always names a complete revision.
		if err := e.send(ctx, e.pending[i], i == 0); err != nil {
			return err
		}
	}
	e.pending = e.pending[:0]
	e.w.SetLastRev(rev)
	return nil
}

func (e *emitter) Progress(ctx context.Context, rev int64) error {
	e.w.SetLastRev(rev)
	e.established()
	asked := e.w.TakeAsked()
	if !e.ownDone {
		// The first report answers the request watch made itself (or
		// one that came at the same time): withhold it unless the
		// caller asked too. With WithProgressNotify a timer's report
		// that came first is withheld instead, and the request's
		// follows at once.
		e.ownDone = true
		if !asked {
			return nil
		}
	}
	return e.send(ctx, spi.Event{Type: spi.EventProgress, Rev: rev, EndOfRev: true}, false)
}

// established notes that the hub has served the watch from its start
// revision: the first event, or the first progress report.
func (e *emitter) established() {
	if !e.ready {
		e.ready = true
		e.w.MarkReady()
	}
}

// send hands ev over, waiting for the consumer; while it waits on the
// first event of a revision (mayEnd) it checks, every 100ms, whether the
// watch has fallen more than its lag bound behind the hub's head, and
// then ends it as slow.
func (e *emitter) send(ctx context.Context, ev spi.Event, mayEnd bool) error {
	if e.w.TrySend(ev) {
		return nil
	}
	var lag <-chan time.Time
	if mayEnd && e.o.MaxLag > 0 {
		if e.lag == nil {
			e.lag = time.NewTicker(100 * time.Millisecond)
		}
		e.lag.Reset(100 * time.Millisecond)
		defer e.lag.Stop()
		lag = e.lag.C
	}
	for {
		sent, err := e.w.Send(ctx, ev, lag, nil)
		if sent || err != nil {
			return err
		}
		if behind := e.hub.Head() - e.w.LastRev(); behind > e.o.MaxLag {
			return &watch.SlowError{LastRev: e.w.LastRev(), Lag: behind}
		}
	}
}
