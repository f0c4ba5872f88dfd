package sessions

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// Clock tells the time. The leader's side reads time only through it, so
// its rules are tested with a clock moved by hand.
type Clock interface {
	Now() time.Time
}

// Cell is what the leader's side needs of its member.
type Cell interface {
	// ReadBarrier returns once leadership is confirmed after the call by
	// a quorum, and the member has applied the read index.
	ReadBarrier(ctx context.Context) error
	// Propose replicates cmd and returns its result once applied here.
	Propose(ctx context.Context, cmd *command.Command) (command.Result, error)
	// AppliedIndex is the index the member has applied.
	AppliedIndex() uint64
	// Sessions lists the sessions in the replicated state, and the
	// session clock, both as of one applied index.
	Sessions() (clock time.Duration, sessions []Loaded, err error)
	// Ack delivers an acknowledgement to member to (which may be this one).
	Ack(to string, ack *Ack)
}

// Loaded is a session as found in the replicated state.
type Loaded struct {
	ID      int64
	TTL     time.Duration
	Unheard time.Duration // see Table.Load
	Silent  bool          // a silence mark stands for it
}

// LeaderConfig configures one term of the leader's side.
type LeaderConfig struct {
	Term            uint64
	Cell            Cell
	Clock           Clock
	ElectionTimeout time.Duration
	Logger          *slog.Logger
}

// Leader is the leader's side of sessions for one term: it loads the
// deadline table from the replicated state, answers keep-alives, marks
// silent sessions, moves the session clock and expires sessions past
// their deadline. Every decision
// it proposes carries its term, so the state machine refuses it once a
// later leader is elected.
//
// Silence marks and seen marks are proposed by one goroutine, in the
// order they were decided: a seen mark (unheard time is zero) that reached
// the log before a silence mark decided earlier would let that mark undo
// it after the holder was told its session is safe.
type Leader struct {
	cfg    LeaderConfig
	et     time.Duration
	life   context.Context // outlives the term: expiries already decided finish
	ctx    context.Context // ends with the term
	cancel context.CancelFunc
	wg     sync.WaitGroup
	readyc chan struct{} // closed once the table is loaded
	wake   chan struct{} // the bookkeeping queue has work

	mu      sync.Mutex // guards what follows
	stopped bool
	// exited is set, under mu, when the proposer goroutine ends: from
	// then on no goroutine may be added (spawn), so that Wait, once its
	// count reaches zero, is never raced by an Add.
	exited bool
	ready  bool
	table  *Table
	queue  []bookkeeping
	// delays are the lock-delay markers this leader times, by key.
	delays map[string]*armed
	// expiring counts the expiries being proposed.
	expiring int
	// proposing is set while the proposer works on what it took from
	// the queue.
	proposing bool
}

// bookkeeping is one decision waiting for the proposer: silence marks and
// the session clock (silent), or a seen mark whose result goes to done.
type bookkeeping struct {
	silent *Work
	seen   []int64
	seqs   []uint32 // the seen sessions' mark numbers (Table.Heard)
	done   chan bool
}

// maxExpiring bounds the expiries being proposed at once: a mass of
// abandoned sessions reaching their deadline together is expired a few
// hundred at a time, each Tick taking up what the last ones left.
const maxExpiring = 256

// maxMarksPerEntry bounds the silence marks of one log entry (each takes
// at most 20 bytes): a mass of sessions falling silent together is
// written in entries of at most about 80 KiB.
const maxMarksPerEntry = 4096

// StartLeader begins a term as leader: the table starts empty (sessions
// created from now on are added by Applied) and is loaded from the
// replicated state once this leader has applied everything committed
// before it. life bounds the Leader's goroutines; Stop ends the term.
func StartLeader(life context.Context, cfg LeaderConfig) *Leader {
	l := &Leader{
		cfg:    cfg,
		et:     cfg.ElectionTimeout,
		life:   life,
		readyc: make(chan struct{}),
		wake:   make(chan struct{}, 1),
		table:  NewTable(cfg.Clock.Now(), cfg.ElectionTimeout),
	}
	l.ctx, l.cancel = context.WithCancel(life)
	l.wg.Add(2)
	go l.load()
	go l.propose()
	return l
}

// Term returns the term this Leader serves.
func (l *Leader) Term() uint64 { return l.cfg.Term }

// Stop ends the term: nothing more is decided or acknowledged. It does
// not wait; Wait does.
func (l *Leader) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.cancel()
}

// Wait returns once every goroutine of the Leader has returned.
func (l *Leader) Wait() { l.wg.Wait() }

// spawn runs f on a goroutine of the Leader, unless the Leader has
// stopped or its proposer has exited (then f does not run): goroutines
// are added only while the proposer still counts, so the count cannot
// reach zero under a concurrent Wait and rise again.
func (l *Leader) spawn(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.exited {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
	return true
}

// Ready is closed once the table has been loaded.
func (l *Leader) Ready() <-chan struct{} { return l.readyc }

func (l *Leader) load() {
	defer l.wg.Done()
	for l.ctx.Err() == nil {
		// A read index is served only once an entry of this term has
		// committed (Raft's own no-op at election), and is at least that
		// entry's index: once applied here, every entry committed before
		// the election has been applied too. No entry of ours is needed,
		// which saves a log write and its round trip.
		ctx, cancel := context.WithTimeout(l.ctx, 2*l.et)
		err := l.cfg.Cell.ReadBarrier(ctx)
		cancel()
		if err != nil {
			t := time.NewTimer(l.et / 4)
			select {
			case <-l.ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		clock, infos, err := l.cfg.Cell.Sessions()
		if err != nil {
			return
		}
		l.mu.Lock()
		if !l.stopped {
			l.table.SetClock(clock)
			for _, si := range infos {
				l.table.Load(si.ID, si.TTL, si.Unheard, si.Silent)
			}
			l.ready = true
			close(l.readyc)
		}
		l.mu.Unlock()
		return
	}
}

// Created is a session whose creation was applied.
type Created struct {
	ID  int64
	TTL time.Duration
}

// Applied records sessions created and ended by an applied batch.
func (l *Leader) Applied(created []Created, ended []int64) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range created {
		l.table.Add(c.ID, c.TTL, now)
	}
	for _, id := range ended {
		l.table.Remove(id)
	}
}

// Tick marks sessions found silent, moves the session clock, and expires
// sessions past their deadline (Table.Tick). Its work is in proportion to
// the sessions that need it, not to those held.
func (l *Leader) Tick() {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	if l.stopped || !l.ready {
		l.mu.Unlock()
		return
	}
	w := l.table.Tick(now, maxExpiring-l.expiring)
	if w.Write {
		silent := w
		silent.Due = nil
		l.enqueueLocked(bookkeeping{silent: &silent})
	}
	l.expiring += len(w.Due)
	l.mu.Unlock()
	for _, x := range w.Due {
		l.expire(x)
	}
	l.tickLockDelays(now)
}

// enqueueLocked queues a decision for the proposer; l.mu is held, so the
// queue's order is the order decisions were taken in.
func (l *Leader) enqueueLocked(b bookkeeping) {
	l.queue = append(l.queue, b)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// propose proposes the queued bookkeeping one command at a time, in
// order, merging neighbours of one kind so that a burst of keep-alives
// after an election costs one seen mark, not one each, and a burst of
// sessions falling silent one entry per few thousand.
func (l *Leader) propose() {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		l.exited = true
		l.mu.Unlock()
	}()
	for {
		select {
		case <-l.ctx.Done():
			l.mu.Lock()
			q := l.queue
			l.queue = nil
			l.mu.Unlock()
			for _, b := range q {
				if b.done != nil {
					b.done <- false
				}
			}
			return
		case <-l.wake:
		}
		l.mu.Lock()
		q := l.queue
		l.queue = nil
		l.proposing = true
		l.mu.Unlock()
		for len(q) > 0 {
			n := 1
			for n < len(q) && (q[n].done != nil) == (q[0].done != nil) {
				n++
			}
			l.proposeRun(q[:n])
			q = q[n:]
		}
		l.mu.Lock()
		l.proposing = false
		l.mu.Unlock()
	}
}

// proposeRun proposes one run of decisions of one kind: seen marks as one
// command, silence marks in commands of at most maxMarksPerEntry marks,
// each with the session clock of the last decision it holds.
func (l *Leader) proposeRun(run []bookkeeping) {
	if run[0].done != nil {
		l.proposeSeen(run)
		return
	}
	for len(run) > 0 {
		c := &command.Session{Term: l.cfg.Term}
		var in []*Work
		for len(run) > 0 && (len(in) == 0 || len(c.Credits)+len(run[0].silent.Marks) <= maxMarksPerEntry) {
			w := run[0].silent
			marks := w.Marks
			if len(in) == 0 && len(marks) > maxMarksPerEntry {
				// One decision too large for an entry: its first part now,
				// the rest (with the same clock) next.
				rest := *w
				rest.Marks, rest.seqs = marks[maxMarksPerEntry:], w.seqs[maxMarksPerEntry:]
				w = &Work{Marks: marks[:maxMarksPerEntry], seqs: w.seqs[:maxMarksPerEntry], Clock: w.Clock, Write: true}
				run[0].silent = &rest
			} else {
				run = run[1:]
			}
			in = append(in, w)
			for _, m := range w.Marks {
				c.Credits = append(c.Credits, command.Credit{ID: m.ID, Nanos: int64(m.Since)})
			}
			c.Clock = int64(w.Clock)
		}
		ok := l.proposeBookkeeping(command.KindSessionSilent, c)
		if !ok {
			// A mark that did not reach the log is looked for again, so
			// the session's silence is still counted in this term. (A lost
			// clock only errs toward keeping sessions.)
			l.mu.Lock()
			if !l.stopped {
				for _, w := range in {
					for i, m := range w.Marks {
						l.table.Unmark(m.ID, w.seqs[i])
					}
				}
			}
			l.mu.Unlock()
		}
	}
}

// proposeSeen proposes a run of seen marks as one command, then records
// them in the table and tells each waiting keep-alive how it went.
func (l *Leader) proposeSeen(run []bookkeeping) {
	c := &command.Session{Term: l.cfg.Term}
	var seqs []uint32
	for _, b := range run {
		c.IDs = append(c.IDs, b.seen...)
		seqs = append(seqs, b.seqs...)
	}
	ok := l.proposeBookkeeping(command.KindSessionSeen, c)
	if ok {
		l.mu.Lock()
		if !l.stopped {
			for i, id := range c.IDs {
				l.table.Seen(id, seqs[i])
			}
		}
		l.mu.Unlock()
	}
	for _, b := range run {
		b.done <- ok
	}
}

// proposeBookkeeping proposes one command of the leader's session
// bookkeeping and reports whether it applied.
func (l *Leader) proposeBookkeeping(kind command.Kind, c *command.Session) bool {
	ctx, cancel := context.WithTimeout(l.ctx, 2*l.et)
	defer cancel()
	res, err := l.cfg.Cell.Propose(ctx, &command.Command{Kind: kind, Session: c})
	return err == nil && res.Status == command.StatusOK
}

// expire proposes the end of a session whose deadline passed, and logs it
// once the cell ended it by this decision.
func (l *Leader) expire(x Expiry) {
	done := func() {
		l.mu.Lock()
		l.expiring--
		l.mu.Unlock()
	}
	ok := l.spawn(func() {
		defer done()
		ctx, cancel := context.WithTimeout(l.life, 2*l.et)
		defer cancel()
		res, err := l.cfg.Cell.Propose(ctx, &command.Command{Kind: command.KindSessionEnd,
			Session: &command.Session{ID: x.ID, Expired: true, Term: l.cfg.Term, LockDelay: l.lockDelayed(x.ID)}})
		if err != nil || res.Status != command.StatusOK || res.SessionID != x.ID {
			return // lost, refused as stale, or ended meanwhile: nothing to report
		}
		owner := x.Owner
		if owner == "" {
			owner = "unknown (not heard this term)"
		}
		l.cfg.Logger.Info("session expired", "session", x.ID, "owner", owner,
			"last_heard_ago", l.cfg.Clock.Now().Sub(x.LastHeard).Round(time.Millisecond),
			"ttl", x.TTL, "term", l.cfg.Term)
	})
	if !ok {
		done()
	}
}

// KeepAlive records a keep-alive at the leader and acknowledges it
// once that is safe. An ack tells the holder that no leader will expire
// its sessions before the keep-alive's send time plus TTL. That holds if
//
//  1. this member led at some moment after the keep-alive arrived (time
//     r): then any later leader was elected after r, because a read
//     index is confirmed by a heartbeat round that a majority answered
//     after r in this term, and a voter of a later term answers no
//     heartbeat of this one (read barrier below);
//  2. the sessions' unheard time in the replicated state is zero, or is
//     committed as zero (a KindSessionSeen of this term) before the ack:
//     a later leader grants TTL minus unheard time from its election, and
//     a silence mark counts only the session clock's advance after the
//     last keep-alive a leader heard (older builds' credits, likewise
//     only time after it), so that grant ends at or after r + TTL; and
//  3. no expiry decided before r applies: this leader's own table holds
//     the session until r + TTL, and a deposed leader's decisions carry
//     its term and are refused outside it.
//
// That is the whole sequence, and its steps run side by side: the read
// barrier starts as soon as the keep-alive arrives, even before the
// table has loaded (which itself waits for a read barrier of this term,
// see StartLeader), and a seen mark, when one is needed, is proposed while
// the barrier is out. Nothing of it is waited for in turn, so after a
// leader change the first keep-alive is answered about one heartbeat
// round after the election's no-op commits. Invariant 6 follows: every
// session the new leader loads gets TTL (less unheard time that no ack
// covered) from its election, and only this leader's own table, never a
// predecessor's, can expire it.
//
// A keep-alive that arrives before the table is ready is held, not
// dropped: its answer goes out once the table is loaded.
func (l *Leader) KeepAlive(from string, ka *KeepAlive) {
	arrived := l.cfg.Clock.Now()
	barrier := make(chan error, 1)
	ctx, cancel := context.WithTimeout(l.ctx, 2*l.et)
	if !l.spawn(func() { barrier <- l.cfg.Cell.ReadBarrier(ctx) }) {
		cancel()
		return
	}
	answer := func() {
		defer cancel()
		select {
		case <-l.readyc:
		case <-ctx.Done():
			return
		}
		alive, gone, seen, ok := l.classify(from, ka, arrived)
		if !ok {
			return
		}
		if seen != nil {
			select {
			case ok := <-seen.done:
				if ok {
					alive = append(alive, seen.seen...)
				}
			case <-ctx.Done():
				return
			}
		}
		if err := <-barrier; err != nil {
			return
		}
		l.mu.Lock()
		stopped := l.stopped
		l.mu.Unlock()
		if stopped {
			return
		}
		l.cfg.Cell.Ack(from, &Ack{Seq: ka.Seq, Alive: alive, Gone: gone})
	}
	if !l.spawn(answer) {
		cancel()
	}
}

// classify records a keep-alive that arrived at arrived in the loaded
// table, and sorts its sessions: alive, gone (ended in the cell), or
// needing a seen mark first, which it queues (in the same critical
// section as the decision, so after any silence mark decided before it). ok is
// false once the term has ended.
func (l *Leader) classify(from string, ka *KeepAlive, arrived time.Time) (alive, gone []int64, seen *bookkeeping, ok bool) {
	// A session's ID is the index of its creation, and Applied adds it to
	// the table before the applied index moves past it: read the index
	// first, so an unknown session at or below it has certainly ended
	// (this leader may apply a creation later than the holder's member).
	applied := l.cfg.Cell.AppliedIndex()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return nil, nil, nil, false
	}
	var marks []int64
	var seqs []uint32
	for _, id := range ka.IDs {
		known, needsSeen, seq := l.table.Heard(id, from, arrived)
		switch {
		case !known && uint64(id) <= applied:
			gone = append(gone, id)
		case !known:
			// Not applied here yet: neither alive nor gone.
		case needsSeen:
			marks = append(marks, id)
			seqs = append(seqs, seq)
		default:
			alive = append(alive, id)
		}
	}
	if len(marks) > 0 {
		seen = &bookkeeping{seen: marks, seqs: seqs, done: make(chan bool, 1)}
		l.enqueueLocked(*seen)
	}
	return alive, gone, seen, true
}
