package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
)

// A client's watches are merged: a watch whose prefix lies under an open
// upstream watch's prefix, and that starts at or after the upstream's
// position, is served by that upstream (one watch on the member), and
// the client fans its revisions out. Each watcher has its own queue and,
// while it has something to deliver, its own goroutine, so a slow
// consumer holds back only itself (past its lag bound it ends with a
// *SlowWatcherError), never the upstream or the other watchers.
//
// Gap-free and exactly-once across members: an upstream delivers whole
// revisions only, remembers the last one (its position), ignores any
// revision at or below it, and resumes from the position + 1 on the next
// member after its connection ends (a compacted resume ends its watchers
// with a *CompactedError, as on a member).

// clientMaxLag bounds a client watcher's queue when it set no WithMaxLag
// (and any WithMaxLag above it): the revisions a consumer may fall
// behind the upstream before its watch ends as slow.
const clientMaxLag = 10_000

type watchMerger struct {
	c  *Client
	wg sync.WaitGroup

	mu     sync.Mutex
	ups    upIndex
	closed bool
}

func newWatchMerger(c *Client) *watchMerger { return &watchMerger{c: c} }

// upstream is one watch on the member, shared by its downstreams.
type upstream struct {
	m      *watchMerger
	prefix string
	prevKV bool
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	pos    int64 // every revision up to pos has been fanned out
	downs  map[*downstream]struct{}
	closed bool
	// established: a member has taken the watch on from pos+1, so its
	// watchers are Ready.
	established bool
	// asking holds the watchers whose RequestProgress waits for pos to
	// reach the member's revision at the time they asked.
	asking map[*downstream]int64
}

// downstream is one Watcher served by an upstream. It keeps no goroutine
// while it has nothing to deliver: what gives it work (a revision or a
// report queued, its end, its progress interval passing) starts one,
// which delivers until nothing is left and exits; its upstream too keeps
// none while its watch is open (upstream.run), so a quiet watch costs
// its client no goroutine.
type downstream struct {
	w      spi.Sink
	up     *upstream
	ctx    context.Context // the watch's, ended by the client's Close too
	cancel context.CancelFunc
	prefix string
	o      spi.WatchOptions
	maxLag int64
	// spawn runs deliverAll on a goroutine of its own (tests replace it).
	spawn func()

	mu    sync.Mutex
	from  int64 // revisions above from are delivered
	queue []dsItem
	err   error         // set when the upstream ended it; delivered after the queue
	kill  chan struct{} // closed when it must end now (slow)
	dead  bool
	// busy: the delivering goroutine has taken an item from the queue
	// and not yet come back for the next, so LastRev is its to move.
	busy bool
	// running: a goroutine delivers; over: the watcher has ended, and
	// none starts again.
	running, over bool
	// quiet: the WithProgressNotify interval passed with nothing
	// delivered, so an EventProgress is due.
	quiet bool
	// asking: a RequestProgress is on its way to the member; more
	// requests until its answer is delivered are the same request.
	asking bool
	timer  *time.Timer // the WithProgressNotify interval's; nil without one
	// stopHooks stops the hooks on the client's and the watch's
	// contexts, at the end.
	stopHooks func()
}

type dsItem struct {
	rev      int64
	events   []clientwire.Event // one whole revision, shared read-only; nil for progress
	progress bool
	// asked: the progress answers this watcher's RequestProgress, so it
	// is delivered as an EventProgress (other progress only moves
	// LastRev).
	asked bool
}

// watch starts a watcher feeding sink, on a shared upstream if one
// covers it.
func (c *Client) Watch(ctx context.Context, prefix string, o spi.WatchOptions, sink spi.Sink) {
	m := c.watches
	if !o.FromSet {
		if m.join(ctx, prefix, o, sink) {
			return
		}
		// No upstream to share: start one at the member's current
		// revision, read now, so nothing after this call is missed.
		res, err := c.read(ctx, &clientwire.Read{Key: startKey(prefix), Serializable: true})
		if err != nil {
			sink.End(err)
			return
		}
		o.FromRev, o.FromSet = res.Rev, true
	}
	if m.join(ctx, prefix, o, sink) {
		return
	}
	m.start(ctx, prefix, o, sink)
}

// startKey is a key read only for the revision it returns.
func startKey(prefix string) string {
	if prefix == "" {
		return "\x00"
	}
	return prefix
}

// join attaches a watcher to an open upstream that covers it, and
// reports whether it did.
func (m *watchMerger) join(ctx context.Context, prefix string, o spi.WatchOptions, sink spi.Sink) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	joined := false
	m.ups.covering(prefix, func(up *upstream) bool {
		if o.PrevKV && !up.prevKV {
			return false
		}
		up.mu.Lock()
		ok := !up.closed && (!o.FromSet || o.FromRev >= up.pos)
		if !ok {
			up.mu.Unlock()
			return false
		}
		from := up.pos
		if o.FromSet {
			from = o.FromRev
		}
		d := m.newDownstream(ctx, up, prefix, o, from, sink)
		up.downs[d] = struct{}{}
		if up.established {
			d.w.MarkReady()
		}
		up.mu.Unlock()
		joined = true
		return true
	})
	return joined
}

// start opens a new upstream from o.FromRev for one watcher.
func (m *watchMerger) start(ctx context.Context, prefix string, o spi.WatchOptions, sink spi.Sink) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		sink.End(errs.Closed)
		return
	}
	up := &upstream{m: m, prefix: prefix, prevKV: o.PrevKV, pos: o.FromRev, downs: map[*downstream]struct{}{},
		asking: map[*downstream]int64{}}
	up.ctx, up.cancel = context.WithCancel(m.c.life)
	d := m.newDownstream(ctx, up, prefix, o, o.FromRev, sink)
	up.downs[d] = struct{}{}
	m.ups.add(up)
	// Counted in m.wg until it has ended (end), with each goroutine it
	// runs on inside that count.
	m.wg.Add(1)
	go up.run()
}

func (m *watchMerger) newDownstream(ctx context.Context, up *upstream, prefix string, o spi.WatchOptions, from int64, sink spi.Sink) *downstream {
	maxLag := int64(clientMaxLag)
	if o.MaxLagSet && o.MaxLag > 0 {
		maxLag = min(o.MaxLag, clientMaxLag)
	}
	dctx, cancel := context.WithCancel(ctx)
	sink.SetLastRev(from)
	d := &downstream{w: sink, up: up, ctx: dctx, cancel: cancel, prefix: prefix, o: o, maxLag: maxLag, from: from,
		kill: make(chan struct{})}
	d.spawn = func() { go d.deliverAll() }
	// Armed before the upstream can see it: from then on anything may
	// start its delivery, and its end leaves m.wg. It is counted in m.wg
	// until it has ended, and each of its goroutines runs inside that
	// count.
	m.wg.Add(1)
	d.mu.Lock() // the hooks below may fire at once
	if o.Progress > 0 {
		d.timer = time.AfterFunc(o.Progress, d.quietPassed)
	}
	// The watch ends with the client, as a member's does when it closes.
	stopLife := context.AfterFunc(m.c.life, cancel)
	stopCtx := context.AfterFunc(dctx, d.kick)
	d.stopHooks = func() {
		stopCtx()
		stopLife()
	}
	d.mu.Unlock()
	sink.OnProgressRequest(d.requestProgress)
	return d
}

// ended is the end of d's last delivery: it stops d's timers, leaves its
// upstream and ends its consumer's watch with err.
func (d *downstream) ended(err error) {
	d.mu.Lock()
	d.over = true
	d.running = false
	if d.timer != nil {
		d.timer.Stop()
	}
	stopHooks := d.stopHooks
	d.mu.Unlock()
	stopHooks()
	d.cancel()
	d.up.m.detach(d.up, d)
	d.w.End(err)
	d.up.m.wg.Done()
}

// detach removes d from up, and ends up when it served d alone.
func (m *watchMerger) detach(up *upstream, d *downstream) {
	m.mu.Lock()
	up.mu.Lock()
	delete(up.downs, d)
	delete(up.asking, d)
	last := len(up.downs) == 0 && !up.closed
	if last {
		up.closed = true
		m.removeLocked(up)
	}
	up.mu.Unlock()
	m.mu.Unlock()
	if last {
		up.cancel()
	}
}

func (m *watchMerger) removeLocked(up *upstream) { m.ups.remove(up) }

// end ends up and all its watchers with err (after what they have
// queued): the last step of its run, once.
func (up *upstream) end(err error) {
	m := up.m
	m.mu.Lock()
	up.mu.Lock()
	up.closed = true
	m.removeLocked(up)
	downs := make([]*downstream, 0, len(up.downs))
	for d := range up.downs {
		downs = append(downs, d)
	}
	up.mu.Unlock()
	m.mu.Unlock()
	up.cancel()
	for _, d := range downs {
		d.finish(err)
	}
	m.wg.Done()
}

func (m *watchMerger) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.wg.Wait()
}

// run keeps the upstream watch open from pos+1, on whichever member the
// client is connected to, until it has no watcher left or ends for good.
// It runs on a goroutine only while it opens the watch, waits between
// attempts or decides where to resume: while the watch is open none
// waits for its end (ClientWatch.AfterEnd runs the next step), so a
// client holding many quiet watches pays no stack for each. This is
// Client.failover's loop, cut at the open watch.
func (up *upstream) run() {
	c := up.m.c
	for {
		conn, err := c.current(up.ctx)
		if err != nil {
			up.end(up.closedOr(err))
			return
		}
		cw, n, err := up.open(conn)
		if cw != nil {
			stop := context.AfterFunc(up.ctx, cw.Cancel)
			cw.AfterEnd(func() {
				stop()
				n, err := up.ended(conn, cw)
				if up.carryOut(conn, n, err) {
					up.run()
				}
			})
			return
		}
		if !up.carryOut(conn, n, err) {
			return
		}
	}
}

// closedOr is errs.Closed once the client is closed, else why the watch
// ended.
func (up *upstream) closedOr(err error) error { return up.m.c.closedOr(up.ctx, err) }

// carryOut does what an attempt said should come next, and reports
// whether to go on; when not, the upstream has ended.
func (up *upstream) carryOut(conn *clientwire.ClientConn, n next, err error) bool {
	done, err := up.m.c.carryOut(up.ctx, conn, n, err, up.closedOr)
	if done {
		up.end(err)
	}
	return !done
}

// open opens the watch on conn from pos+1: the watch, or what to do
// next when it did not open.
func (up *upstream) open(conn *clientwire.ClientConn) (*clientwire.ClientWatch, next, error) {
	c := up.m.c
	up.mu.Lock()
	from := up.pos + 1
	up.mu.Unlock()
	// The frames are fanned out on the connection's reader as they
	// arrive (fanOut only queues, so it never blocks the reader): the
	// watchers' queues are the watch's only buffer in the client.
	var pending []clientwire.Event
	onFrame := func(msg clientwire.Message) bool {
		// A frame may come before Watch returns: the watch is
		// established by then, and its watchers are Ready before they
		// see its first event.
		up.establish()
		switch msg := msg.(type) {
		case *clientwire.WatchEvents:
			for _, ev := range msg.Events {
				pending = append(pending, ev)
				if ev.EndOfRev {
					up.fanOut(ev.KV.ModRev, pending)
					pending = nil
				}
			}
		case *clientwire.WatchProgress:
			up.progress(msg.Rev)
		}
		return true
	}
	cw, err := conn.Watch(up.ctx, &clientwire.WatchStart{Prefix: up.prefix, FromRev: from, PrevKV: up.prevKV,
		ProgressInterval: c.ElectionTimeout()}, onFrame)
	if err != nil {
		var we *clientwire.Error
		switch {
		case up.ctx.Err() != nil:
			return nil, nextAnswered, up.closedOr(up.ctx.Err())
		case errors.As(err, &we) && !clientwire.Passing(we.Code):
			return nil, nextAnswered, clientwire.ErrorOf(we.Code, we.Message)
		case errors.As(err, &we) && we.Code != clientwire.CodeClosed:
			// The member cannot serve it now: a moment, then again, here
			// (if the connection lives on) or on the next member.
			return nil, nextPause, nil
		}
		return nil, nextMember, nil // the connection ended (or its member is closing): the next one
	}
	up.establish()
	return cw, 0, nil
}

// ended says what comes after the watch cw on conn ended.
func (up *upstream) ended(conn *clientwire.ClientConn, cw *clientwire.ClientWatch) (next, error) {
	end := cw.End()
	// Resume from pos+1: here at once while the connection lives, else
	// on the next member.
	resume := nextMember
	if conn.Err() == nil {
		resume = nextNow
	}
	switch end.Code {
	case clientwire.CodeClosed:
		// The member is closing (a storage fault stops it too) and ends
		// its connections soon, but until it does it takes a new watch
		// and ends it at once, closed again: resuming here would spin
		// (and, in virtual time, stop the clock). Resume on the next
		// member.
		return nextMember, nil
	case clientwire.CodeConnLost, clientwire.CodeSlowWatcher:
		return resume, nil
	case clientwire.CodeNone:
		if up.ctx.Err() != nil {
			return nextAnswered, up.closedOr(up.ctx.Err())
		}
		return resume, nil
	case clientwire.CodeCompacted:
		return nextAnswered, &spi.CompactedError{Oldest: end.CompactRev}
	default:
		if !clientwire.Passing(end.Code) {
			return nextAnswered, clientwire.ErrorOf(end.Code, end.Message)
		}
		if up.ctx.Err() != nil {
			return nextAnswered, up.closedOr(up.ctx.Err())
		}
		// The member ended it for a passing reason of its own (see
		// clientwire.Passing): resume after a moment.
		return nextPause, nil
	}
}

// establish marks the upstream's watchers Ready, once: a member has
// taken the watch on.
func (up *upstream) establish() {
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.established {
		return
	}
	up.established = true
	for d := range up.downs {
		d.w.MarkReady()
	}
}

// fanOut hands one whole revision to every watcher that wants it.
func (up *upstream) fanOut(rev int64, events []clientwire.Event) {
	up.mu.Lock()
	defer up.mu.Unlock()
	if rev <= up.pos {
		return // delivered before a resume
	}
	up.pos = rev
	for d := range up.downs {
		d.push(dsItem{rev: rev, events: events}, up.pos)
	}
	up.answerLocked()
}

func (up *upstream) progress(rev int64) {
	up.mu.Lock()
	defer up.mu.Unlock()
	if rev <= up.pos {
		return
	}
	up.pos = rev
	for d := range up.downs {
		d.push(dsItem{rev: rev, progress: true}, up.pos)
	}
	up.answerLocked()
}

// askProgress answers d's RequestProgress: it reads the member's
// current revision, then waits for the upstream to have fanned out
// every revision up to it (from the member's events, or the progress
// reports it sends on a quiet prefix every ProgressInterval), and queues
// d an EventProgress at the upstream's position then, after every event
// queued before it. Only d hears of it: a merged watcher that did not
// ask gets nothing.
func (up *upstream) askProgress(d *downstream) {
	c := up.m.c
	var rev int64
	for {
		res, err := c.read(d.ctx, &clientwire.Read{Key: startKey(up.prefix), Serializable: true})
		if err == nil {
			rev = res.Rev
			break
		}
		if d.ctx.Err() != nil || c.life.Err() != nil {
			return // the watcher is ending; nobody waits for the answer
		}
		select {
		case <-time.After(c.ElectionTimeout() / 2):
		case <-d.ctx.Done():
			return
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if _, open := up.downs[d]; !open {
		return
	}
	up.asking[d] = rev
	up.answerLocked()
}

// answerLocked queues the progress every watcher waiting for a revision
// up to pos asked for.
func (up *upstream) answerLocked() {
	for d, want := range up.asking {
		if want <= up.pos {
			delete(up.asking, d)
			d.push(dsItem{rev: up.pos, progress: true, asked: true}, up.pos)
		}
	}
}

// push queues it for the watcher, or ends the watcher as slow when it
// is maxLag revisions behind.
func (d *downstream) push(it dsItem, head int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead || (it.rev <= d.from && !it.asked) {
		return
	}
	if it.progress && !it.asked && len(d.queue) == 0 && !d.busy {
		// A report nobody asked for only moves LastRev: with nothing
		// queued or being delivered it is moved here, without starting a
		// delivery (a member reports each quiet watch about every
		// election timeout, to each of thousands of watches).
		d.w.SetLastRev(max(it.rev, d.w.LastRev()))
		return
	}
	if n := len(d.queue); n > 0 && d.queue[n-1].progress && it.progress {
		// Progress reports supersede each other; an answer stays one.
		it.asked = it.asked || d.queue[n-1].asked
		d.queue[n-1] = it
	} else {
		d.queue = append(d.queue, it)
	}
	if int64(len(d.queue)) > d.maxLag {
		d.dead = true
		d.err = &spi.SlowError{LastRev: d.w.LastRev(), Lag: head - d.w.LastRev()}
		d.queue = nil
		close(d.kill)
	}
	d.kickLocked()
}

// finish ends the watcher with err once it has delivered its queue.
func (d *downstream) finish(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return
	}
	d.dead = true
	d.err = err
	d.kickLocked()
}

// kick starts a delivery if none runs.
func (d *downstream) kick() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.kickLocked()
}

func (d *downstream) kickLocked() {
	if d.running || d.over {
		return
	}
	d.running = true
	d.spawn()
}

// quietPassed runs when the WithProgressNotify interval passed with
// nothing delivered: an EventProgress is due.
func (d *downstream) quietPassed() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.over {
		return
	}
	d.quiet = true
	d.timer.Reset(d.o.Progress)
	d.kickLocked()
}

// requestProgress takes the consumer's RequestProgress: the member is
// asked, on a goroutine of its own, and its answer comes back queued.
func (d *downstream) requestProgress() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.asking || d.over {
		return
	}
	d.asking = true
	// d's count keeps the group from zero here (d has not ended).
	d.up.m.wg.Go(func() { d.up.askProgress(d) })
}

// next is what the delivery does next: an item from the queue, a due
// EventProgress (quiet), or the watch's end (err); with none of them it
// returns nothing and the delivery ends (ok and quiet false, err nil).
func (d *downstream) next(c *Client) (it dsItem, ok, quiet bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx.Err() != nil {
		return dsItem{}, false, false, c.closedOr(d.ctx, d.ctx.Err())
	}
	if len(d.queue) > 0 {
		it := d.queue[0]
		d.queue[0] = dsItem{}
		d.queue = d.queue[1:]
		d.busy = true
		if it.progress && it.asked {
			d.asking = false
		}
		return it, true, false, nil
	}
	d.busy = false
	if d.dead && d.err != nil {
		return dsItem{}, false, false, d.err
	}
	if d.quiet {
		d.quiet = false
		return dsItem{}, false, true, nil
	}
	d.running = false
	return dsItem{}, false, false, nil
}

// deliverAll delivers the watcher's queue, and what else is due, until
// nothing is; it ends the watch when it must end.
func (d *downstream) deliverAll() {
	c := d.up.m.c
	for {
		it, ok, quiet, err := d.next(c)
		switch {
		case err != nil:
			d.ended(err)
			return
		case quiet:
			err = d.send(c, spi.Event{Type: spi.EventProgress, Rev: d.w.LastRev(), EndOfRev: true})
		case !ok:
			return
		case it.progress:
			rev := max(it.rev, d.w.LastRev())
			d.w.SetLastRev(rev)
			if it.asked {
				err = d.send(c, spi.Event{Type: spi.EventProgress, Rev: rev, EndOfRev: true})
			}
		default:
			if err = d.deliver(c, it); err == nil {
				d.resetQuiet()
			}
		}
		if err != nil {
			d.ended(err)
			return
		}
	}
}

// resetQuiet starts the WithProgressNotify interval again after a
// delivery.
func (d *downstream) resetQuiet() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.over {
		d.timer.Reset(d.o.Progress)
	}
}

// deliver sends one revision's events that the watcher wants.
func (d *downstream) deliver(c *Client, it dsItem) error {
	var out []spi.Event
	for i := range it.events {
		e := &it.events[i]
		if !strings.HasPrefix(e.KV.Key, d.prefix) {
			continue
		}
		t := spi.EventPut
		if e.Type == clientwire.EventDelete {
			t = spi.EventDelete
		}
		if !d.o.Wants(t) || !d.o.Admits(e.KV.Key) {
			continue
		}
		ev := spi.Event{Type: t, KV: e.KV, Rev: it.rev}
		if d.o.PrevKV {
			ev.PrevKV = e.PrevKV
		}
		out = append(out, ev)
	}
	for i := range out {
		out[i].EndOfRev = i == len(out)-1
		if err := d.send(c, out[i]); err != nil {
			return err
		}
	}
	d.w.SetLastRev(it.rev)
	return nil
}

func (d *downstream) send(c *Client, ev spi.Event) error {
	sent, err := d.w.Send(d.ctx, ev, nil, d.kill)
	switch {
	case err != nil:
		return c.closedOr(d.ctx, err)
	case !sent: // killed: too slow
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.err
	}
	return nil
}

// closedOr is errs.Closed once the client is closed, else err.
func (c *Client) closedOr(ctx context.Context, err error) error {
	if c.life.Err() != nil {
		return errs.Closed
	}
	return err
}
