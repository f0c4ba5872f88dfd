package storage

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/lockq"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Apply applies committed entries in order in one Pebble batch, which
// the image writer commits after Apply returns (image.go): the state
// Apply publishes is in memory at once, and in Pebble shortly after. cs, when non-nil, is the conf state after these
// entries (raftnode has applied their conf changes). An entry whose
// command carries an unknown format version stops the apply with
// command.ErrVersion; a malformed one yields StatusInvalid.
//
// When Apply returns an error nothing of this call is applied: the batch
// and the working copy of the keys are dropped and the applied index
// stays where it was, so a node that halts on an unknown command replays
// it after an upgrade. Entries at or below the applied index are skipped,
// so replaying is harmless.
func (sm *StateMachine) Apply(ents []*pb.Entry, cs *pb.ConfState) (ApplyOutput, error) {
	return sm.apply(ents, cs, 0)
}

// ApplyWithin is Apply with a read budget, for a caller that must not be
// held up long (the raft goroutine): once the entries' reads (the keys
// transactions' gets walk, in command.ReadCost units) pass budget, it
// stops and returns ErrApplyBudget, having applied nothing, and the
// caller applies them with Apply where it may take its time. The budget
// bounds what the call reads, whatever the entries ask, and the outcome
// of each command is the one Apply gives: only where it is computed
// changes.
func (sm *StateMachine) ApplyWithin(ents []*pb.Entry, cs *pb.ConfState, budget int64) (ApplyOutput, error) {
	if budget <= 0 {
		return ApplyOutput{}, fmt.Errorf("storage: ApplyWithin a budget of %d", budget)
	}
	return sm.apply(ents, cs, budget)
}

// apply is Apply with a read budget (0: none).
func (sm *StateMachine) apply(ents []*pb.Entry, cs *pb.ConfState, budget int64) (ApplyOutput, error) {
	if err := sm.enter(); err != nil {
		return ApplyOutput{}, err
	}
	defer sm.life.RUnlock()
	sm.applyMu.Lock()
	defer sm.applyMu.Unlock()
	if err := sm.img.failed(); err != nil {
		return ApplyOutput{}, err
	}

	var out ApplyOutput
	a := &sm.ap
	b := sm.db.NewBatch()
	defer func() {
		if b != nil {
			b.Close()
		}
	}()
	a.begin(sm, b, &out)
	a.budget = budget
	defer a.end()

	for i, e := range ents {
		a.slabs.left = len(ents) - i
		idx := e.GetIndex()
		if idx <= a.m.index {
			continue
		}
		if idx != a.m.index+1 {
			return ApplyOutput{}, fmt.Errorf("storage: apply: entry %d does not follow applied index %d", idx, a.m.index)
		}
		a.m.index, a.m.term = idx, e.GetTerm()
		if idx%retireEvery == 0 {
			if err := a.retireProposers(idx); err != nil {
				return ApplyOutput{}, fmt.Errorf("storage: apply entry %d: %w", idx, err)
			}
		}
		// Conf changes go to Raft through raftnode (which passes the
		// outcome as cs); here they update the address book. Empty
		// entries are new leaders' no-ops.
		if e.GetType() != pb.EntryNormal {
			if err := a.applyConfChange(e); err != nil {
				return ApplyOutput{}, fmt.Errorf("storage: apply entry %d: %w", idx, err)
			}
			continue
		}
		if len(e.GetData()) == 0 {
			continue
		}
		cmd, err := command.Decode(e.GetData())
		if errors.Is(err, command.ErrVersion) {
			return ApplyOutput{}, fmt.Errorf("storage: apply entry %d: %w", idx, err)
		}
		if err != nil {
			a.result(Applied{Index: idx, Result: a.status(command.StatusInvalid)})
			continue
		}
		res, err := a.execOnce(idx, e.GetTerm(), cmd)
		if err != nil {
			return ApplyOutput{}, fmt.Errorf("storage: apply entry %d: %w", idx, err)
		}
		a.result(Applied{Index: idx, ID: cmd.ID, Result: res})
	}

	var newCS *pb.ConfState
	if cs != nil && !proto.Equal(cs, sm.confState.Load()) {
		newCS = proto.CloneOf(cs)
		conf, err := encodeConf(newCS)
		if err != nil {
			return ApplyOutput{}, err
		}
		if err := b.Set(metaConfKey, conf, nil); err != nil {
			return ApplyOutput{}, fmt.Errorf("storage: apply: %w", err)
		}
	}
	if a.m == sm.cur && newCS == nil && !out.MembersChanged {
		return out, nil // nothing new: no need to write
	}
	if err := a.pruneHistory(); err != nil {
		return ApplyOutput{}, err
	}
	a.vbuf = appendMeta(a.vbuf[:0], a.m)
	if err := b.Set(metaAppliedKey, a.vbuf, nil); err != nil {
		return ApplyOutput{}, fmt.Errorf("storage: apply: %w", err)
	}
	if err := sm.img.push(b); err != nil {
		return ApplyOutput{}, err
	}
	b = nil // the writer's now
	sm.publish(a.m, newCS, a.mem)
	return out, nil
}

// applier is the working state of one Apply call. It lives in the
// StateMachine so its scratch buffers are reused from call to call: every
// key and record is built in them, and Pebble copies what it keeps.
type applier struct {
	sm *StateMachine
	// b only takes writes: every read is of mem.
	b *pebble.Batch
	// mem is the live state as of the entries applied so far: a clone of
	// the published view's, which it replaces once b commits.
	mem memState
	m   smMeta // the state as of the entries applied so far
	out *ApplyOutput

	kbuf  []byte   // the KV key of the last getKV
	ibuf  []byte   // index and history keys
	ebuf  []byte   // the ends of range deletions
	vbuf  []byte   // records
	hbuf  []byte   // history records
	items []kvItem // scan's
	// gen numbers the Apply calls: the proposer result arrays this one
	// made are marked with it (proposerItem.gen).
	gen uint64
	// slabs serve this call's results and events (slab.go).
	slabs slabs
	// budget bounds the reads of this call (ApplyWithin; 0: none), spent
	// counts them.
	budget, spent int64
	// members are the address book records this call wrote (members.go),
	// which its later conf changes must see; nil until one is.
	members map[uint64]MemberInfo
}

func (a *applier) begin(sm *StateMachine, b *pebble.Batch, out *ApplyOutput) {
	a.sm, a.b, a.m, a.out = sm, b, sm.cur, out
	a.mem = sm.view.Load().clone()
	a.gen++
}

// end drops the references of one call, keeping only the buffers, unless
// an unusual command (a session end with many keys) grew one to a size
// not worth keeping around.
func (a *applier) end() {
	a.sm, a.b, a.mem, a.out = nil, nil, memState{}, nil
	a.budget, a.spent = 0, 0
	a.members = nil
	a.slabs = slabs{} // what they served has left with the results
	for _, buf := range []*[]byte{&a.kbuf, &a.ibuf, &a.ebuf, &a.vbuf, &a.hbuf} {
		if cap(*buf) > 1<<20 {
			*buf = nil
		}
	}
	// The items point into a tree: dropping them lets it go.
	clear(a.items)
	if cap(a.items) > 1<<14 {
		a.items = nil
	}
	a.items = a.items[:0]
}

// result records one command's result, sized for the batch at the
// first: one array per Apply rather than a doubling series.
func (a *applier) result(r Applied) {
	if a.out.Results == nil {
		a.out.Results = make([]Applied, 0, min(a.slabs.left, maxSlab))
	}
	a.out.Results = append(a.out.Results, r)
}

// status is the result of a command that changed nothing.
func (a *applier) status(s command.Status) command.Result {
	return command.Result{Status: s, Rev: a.m.rev}
}

// execOnce runs cmd, once: a command with a proposer that already
// applied gets its kept result instead (proposers.go).
func (a *applier) execOnce(idx, term uint64, cmd *command.Command) (command.Result, error) {
	p := cmd.Proposer
	if p == nil {
		return a.exec(idx, term, cmd)
	}
	if cmd.Kind == command.KindResolve {
		return a.resolve(idx, cmd)
	}
	it, kept, refused, run := a.proposerCheck(p)
	switch {
	case kept != nil:
		return repeatResult(kept, cmd), nil
	case !run:
		return a.status(refused), nil
	}
	// exec leaves the proposer table alone: it is still as checked.
	res, err := a.exec(idx, term, cmd)
	if err != nil {
		return command.Result{}, err
	}
	if err := a.recordResult(idx, p, it, cmd, &res); err != nil {
		return command.Result{}, err
	}
	return res, nil
}

func (a *applier) exec(idx, term uint64, cmd *command.Command) (command.Result, error) {
	// A leader's session decision is valid only in the term it was made
	// in. A deposed leader that has not noticed (paused, partitioned)
	// decides from a deadline table that stopped being the cell's when its
	// successor was elected; if its proposal is forwarded to the
	// successor, or otherwise reaches the log in a later term, applying it
	// would expire sessions that the successor's grace still covers.
	if s := cmd.Session; s != nil && s.Term != 0 && s.Term != term {
		return a.status(command.StatusStaleTerm), nil
	}
	switch cmd.Kind {
	case command.KindTxn:
		t := cmd.Txn
		if t == nil {
			t = &command.Txn{}
		}
		return a.txn(t)
	case command.KindSessionCreate:
		return a.sessionCreate(idx, cmd.Session)
	case command.KindSessionEnd:
		return a.sessionEnd(cmd.Session)
	case command.KindSessionSeen:
		return a.sessionUnheard(cmd.Session, true)
	case command.KindSessionCredit:
		return a.sessionUnheard(cmd.Session, false)
	case command.KindSessionSilent:
		return a.sessionSilent(cmd.Session)
	case command.KindNoop:
		return a.status(command.StatusOK), nil
	}
	return a.status(command.StatusInvalid), nil
}

// getKV reads key as of the entries applied so far, and its size for the
// quota. The value is only returned (copied: it leaves the state machine
// in results and events) when wantValue is set. a.kbuf holds the storage
// key afterwards.
func (a *applier) getKV(key string, wantValue bool) (kv command.KV, size int64, found bool) {
	a.kbuf = appendKVKey(a.kbuf[:0], key)
	it, ok := a.mem.keys.Get(kvItem{key: key})
	if !ok {
		return kv, 0, false
	}
	kv = *it.kv
	size = int64(len(key) + len(kv.Value))
	if wantValue {
		kv.Value = bytes.Clone(kv.Value)
	} else {
		kv.Value = nil
	}
	return kv, size, true
}

// setKV makes kv (as just written to the batch) the key's state in the
// working tree.
func (a *applier) setKV(kv *command.KV) {
	a.mem.keys.ReplaceOrInsert(kvItem{key: kv.Key, kv: storedKV(*kv)})
	if lockq.IsDelayMarker(kv.Key) {
		a.mem.delays.ReplaceOrInsert(kv.Key)
	}
}

// deleteKV removes key from the working tree.
func (a *applier) deleteKV(key string) {
	a.mem.keys.Delete(kvItem{key: key})
	a.mem.delays.Delete(key)
}

// hasSession reports whether session id exists as of the entries applied
// so far.
func (a *applier) hasSession(id int64) bool {
	return a.mem.sessions.Has(sessionItem{id: id})
}

// scan calls fn for every key under prefix, in key order, as of the
// entries applied so far. fn's value aliases the tree's, which readers
// share: fn copies it before it leaves the state machine, and never
// writes into it. The keys are collected before the first call, so
// writes fn makes do not change what it sees; the collection reuses one
// buffer, so fn must not call scan.
func (a *applier) scan(prefix string, fn func(kv *command.KV) error) error {
	items := a.items[:0]
	a.mem.ascendPrefix(prefix, func(it kvItem) bool {
		items = append(items, it)
		return true
	})
	a.items = items
	for _, it := range items {
		kv := *it.kv
		if err := fn(&kv); err != nil {
			return err
		}
	}
	return nil
}

// newRevision records the events of one new revision: its history record
// goes into the batch and the revision into the output for the watch hub.
func (a *applier) newRevision(events []Event) error {
	a.m.rev++
	a.hbuf = appendHistoryRecord(a.hbuf[:0], events)
	a.ibuf = appendHistoryKey(a.ibuf[:0], a.m.rev)
	if err := a.b.Set(a.ibuf, a.hbuf, nil); err != nil {
		return err
	}
	if a.out.Changes == nil {
		a.out.Changes = make([]Revision, 0, min(a.slabs.left, maxSlab))
	}
	a.out.Changes = append(a.out.Changes, Revision{Rev: a.m.rev, Events: events})
	return nil
}

// The history is pruned in two steps. The retention window moves with
// every batch: m.oldest (what History and OldestRevision promise) is
// always rev - HistoryRevisions + 1, exactly. The records that fall out
// of it are deleted later, a whole chunk at once, by one range deletion
// whose end is a multiple of the chunk: Pebble then drops the tables the
// history filled (a delete-only compaction) instead of carrying a point
// tombstone per revision down the levels, which grew the data directory
// with the write rate rather than with the state. Nothing reads history
// records below m.oldest (History seeks from it), so the few chunks'
// worth left behind cost only disk, bounded by historyChunk. The chunk
// ends depend only on the revision, so every member, however its
// entries were batched, holds the same records at the same applied index.

// minHistoryChunk is the smallest number of revisions deleted at once.
// One range tombstone per chunk also keeps the memtable's tombstones
// (which readers refragment) few.
const minHistoryChunk = 1024

// historyChunk is how many revisions of history are deleted at once: an
// eighth of the window, so the records left behind add at most that much
// to the history's footprint.
func historyChunk(window int64) int64 { return max(minHistoryChunk, window/8) }

// pruneHistory moves the retention window to the revisions applied so
// far, once per batch, and deletes the records below it when a chunk
// boundary has been passed.
func (a *applier) pruneHistory() error {
	oldest := a.m.rev - a.sm.opts.HistoryRevisions + 1
	if oldest <= a.m.oldest {
		return nil
	}
	chunk := historyChunk(a.sm.opts.HistoryRevisions)
	if end := oldest / chunk * chunk; end > a.m.oldest/chunk*chunk {
		// From the first revision: a store pruned with another chunk size
		// (HistoryRevisions changed) or one record at a time (older
		// versions) may have records below the last boundary.
		if err := a.b.DeleteRange(appendHistoryKey(nil, 0), appendHistoryKey(nil, end), nil); err != nil {
			return fmt.Errorf("storage: apply: prune history: %w", err)
		}
	}
	a.m.oldest = oldest
	return nil
}

// sessionCreate opens a session. A charged creation (this build's) is
// refused when its bytes would take the keyspace past the quota, and a
// bounded one (a client's, Session.MaxSessions) when its owner already
// holds that many sessions; both decisions read only the replicated
// state and the command, so every member takes the same.
func (a *applier) sessionCreate(idx uint64, s *command.Session) (command.Result, error) {
	if s == nil || s.TTL <= 0 || s.MaxSessions < 0 {
		return a.status(command.StatusInvalid), nil
	}
	if s.MaxSessions > 0 && s.Owner != "" && a.mem.ownerSessions(s.Owner) >= s.MaxSessions {
		return a.status(command.StatusTooManySessions), nil
	}
	if s.Charged && a.used()+sessionCost(s.TTL, s.Owner) > a.sm.opts.QuotaBytes {
		return a.status(command.StatusQuotaExceeded), nil
	}
	// The entry index is unique forever and the same on every member.
	id := int64(idx)
	a.ibuf = appendSessionKey(a.ibuf[:0], id)
	it := sessionItem{id: id, ttl: s.TTL, owner: s.Owner, charged: s.Charged}
	a.vbuf = appendSessionRecord(a.vbuf[:0], it)
	if err := a.b.Set(a.ibuf, a.vbuf, nil); err != nil {
		return command.Result{}, err
	}
	a.mem.addSession(it)
	a.out.SessionsCreated = append(a.out.SessionsCreated, SessionInfo{ID: id, TTL: s.TTL, Owner: s.Owner})
	res := a.status(command.StatusOK)
	res.SessionID = id
	return res, nil
}

// used is what counts against the quota as of the entries applied so
// far: the live keys and values, and the charged sessions.
func (a *applier) used() int64 { return a.m.size + a.mem.sessionBytes }

// sessionUnheard resets (seen) or adds to (credit) the unheard time of
// sessions. Unknown sessions are skipped: they may have ended meanwhile.
// A seen mark also lifts a silence mark: the leader heard the session.
func (a *applier) sessionUnheard(s *command.Session, seen bool) (command.Result, error) {
	if s == nil {
		return a.status(command.StatusInvalid), nil
	}
	update := func(id, add int64) error {
		it, ok := a.mem.sessions.Get(sessionItem{id: id})
		if !ok {
			return nil
		}
		if seen {
			it.unheard, it.marked, it.mark = 0, false, 0
		} else if add > 0 {
			it.unheard += add
		}
		return a.putSession(it)
	}
	if seen {
		for _, id := range s.IDs {
			if err := update(id, 0); err != nil {
				return command.Result{}, err
			}
		}
	} else {
		for _, c := range s.Credits {
			if err := update(c.ID, c.Nanos); err != nil {
				return command.Result{}, err
			}
		}
	}
	return a.status(command.StatusOK), nil
}

// sessionSilent applies a leader's KindSessionSilent: the session clock
// moves forward to Session.Clock (never back), and each listed session not
// already marked is marked silent since its Nanos, at most the clock. A
// session already marked keeps its mark: it has been silent since then.
// Unknown sessions are skipped. Only a leader decides these: without a
// term the command is invalid.
func (a *applier) sessionSilent(s *command.Session) (command.Result, error) {
	if s == nil || s.Term == 0 || s.Clock < 0 {
		return a.status(command.StatusInvalid), nil
	}
	if s.Clock > a.mem.clock {
		a.mem.clock = s.Clock
		if err := a.b.Set(metaClockKey, appendClock(a.vbuf[:0], s.Clock), nil); err != nil {
			return command.Result{}, err
		}
	}
	for _, c := range s.Credits {
		it, ok := a.mem.sessions.Get(sessionItem{id: c.ID})
		if !ok || it.marked {
			continue
		}
		it.marked, it.mark = true, min(max(c.Nanos, 0), a.mem.clock)
		if err := a.putSession(it); err != nil {
			return command.Result{}, err
		}
	}
	return a.status(command.StatusOK), nil
}

// putSession writes an existing session's changed bookkeeping.
func (a *applier) putSession(it sessionItem) error {
	a.ibuf = appendSessionKey(a.ibuf[:0], it.id)
	a.vbuf = appendSessionRecord(a.vbuf[:0], it)
	if err := a.b.Set(a.ibuf, a.vbuf, nil); err != nil {
		return err
	}
	a.mem.sessions.ReplaceOrInsert(it)
	return nil
}

// sessionEnd deletes the session and every key it owns, all in one
// revision, so watchers see the expiry as one batch of events (invariant 5).
// An expiry flagged LockDelay also puts, in that revision, a lock-delay
// marker for each lock the session held with a delay (lockdelay.go). Ending an unknown session
// is a no-op: close and expiry may race.
func (a *applier) sessionEnd(s *command.Session) (command.Result, error) {
	if s == nil {
		return a.status(command.StatusInvalid), nil
	}
	ended, ok := a.mem.sessions.Get(sessionItem{id: s.ID})
	if !ok {
		return a.status(command.StatusOK), nil
	}
	owned := a.mem.ownedBy(s.ID)
	var markers []command.KV
	if s.Expired && s.LockDelay {
		markers = a.expiryMarkers(s.ID, owned)
	}

	rev := a.m.rev + 1
	events := make([]Event, 0, len(owned)+len(markers))
	for _, key := range owned {
		kv, size, found := a.getKV(key, true)
		// Puts keep the index in step with ownership, so this only guards
		// against an index entry that outlived its key.
		if !found || kv.Session != s.ID {
			continue
		}
		if err := a.b.Delete(a.kbuf, nil); err != nil {
			return command.Result{}, err
		}
		a.deleteKV(key)
		a.m.size -= size
		prev := kv
		kv.Value, kv.ModRev = nil, rev
		events = append(events, Event{Type: EventDelete, KV: kv, Prev: &prev})
	}
	// Point deletes rather than one range deletion: a tombstone per session
	// end would pile up in the memtable, which readers refragment.
	for _, key := range owned {
		a.ibuf = appendOwnedKey(a.ibuf[:0], s.ID, key)
		if err := a.b.Delete(a.ibuf, nil); err != nil {
			return command.Result{}, err
		}
		a.mem.owned.Delete(ownedItem{session: s.ID, key: key})
	}
	a.ibuf = appendSessionKey(a.ibuf[:0], s.ID)
	if err := a.b.Delete(a.ibuf, nil); err != nil {
		return command.Result{}, err
	}
	a.mem.removeSession(ended)
	a.out.SessionsEnded = append(a.out.SessionsEnded, s.ID)
	// The markers go in after the deletes, in the same revision: a
	// watcher sees the holder's key go and the marker come at once.
	put, err := a.putMarkers(markers, rev)
	if err != nil {
		return command.Result{}, err
	}
	events = append(events, put...)
	if len(events) > 0 {
		if err := a.newRevision(events); err != nil {
			return command.Result{}, err
		}
	}
	res := a.status(command.StatusOK)
	res.SessionID = s.ID
	return res, nil
}
