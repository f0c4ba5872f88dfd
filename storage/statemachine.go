package storage

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// StateMachine is the replicated state: keys, sessions, the cell revision
// and the change history. Apply is called from one goroutine; reads are
// safe concurrently with it and see the state as of some applied index.
//
// The live keys and sessions are also held in memory (see memState), and
// Get, List and Sessions read only that: Apply builds the next state on a
// copy-on-write clone and publishes it after its batch commits.
//
// Apply, bootstrap, an install and afterInstall must not run
// concurrently with each other (the Raft node serialises them); a mutex
// enforces it anyway. Everything else is safe for concurrent use.
type StateMachine struct {
	db   *pebble.DB
	opts *Options
	// img commits Apply's batches to Pebble behind the applied index
	// (image.go).
	img *imageWriter

	// life keeps the database open under every operation: each holds it for
	// reading, close takes it for writing, so nothing touches a closed
	// Pebble (which panics).
	life   sync.RWMutex
	closed bool

	// applyMu serialises the writers of the state (see the type doc).
	applyMu sync.Mutex
	cur     smMeta  // the state as of the last commit; guarded by applyMu
	ap      applier // Apply's scratch space, reused; guarded by applyMu

	// Copies of cur for readers, stored after each commit. view is
	// stored first: a reader that waited for an applied index must find
	// keys at least that new.
	view         atomic.Pointer[view]
	appliedIndex atomic.Uint64
	revision     atomic.Int64
	oldest       atomic.Int64
	keyspace     atomic.Int64 // bytes of live keys and values, as the quota counts them
	confState    atomic.Pointer[pb.ConfState]

	snapMu    sync.Mutex
	snaps     map[uint64]*heldSnapshot
	snapSeq   uint64
	readers   map[*snapReader]struct{}
	chunkSize int // snapshot chunk bound; a field so tests can shrink it

	stageMu sync.Mutex
	stage   stagingState
	disk    stageDisk // where stage writes (setStaging)
	// installed is the meta the install wrote, for afterInstall should
	// rereading it from disk fail; installedMem the live state it wrote,
	// which afterInstall publishes.
	installed    smMeta
	installedMem memState
}

func newStateMachine(db *pebble.DB, opts *Options) (*StateMachine, error) {
	if opts.HistoryRevisions == 0 || opts.QuotaBytes == 0 || opts.Logger == nil {
		o := *opts
		o.setDefaults()
		opts = &o
	}
	sm := &StateMachine{
		db:        db,
		opts:      opts,
		snaps:     make(map[uint64]*heldSnapshot),
		readers:   make(map[*snapReader]struct{}),
		chunkSize: 1 << 20,
	}
	if err := sm.load(); err != nil {
		return nil, err
	}
	sm.img = newImageWriter(opts.imageFault, opts.beforeImageCommit)
	return sm, nil
}

// load reads the bookkeeping and the live state from disk into memory. A
// store that never applied anything has no meta record and starts empty.
func (sm *StateMachine) load() error {
	m, cs, err := readMeta(sm.db)
	if err != nil {
		return err
	}
	mem, err := loadMemState(sm.db)
	if err != nil {
		return err
	}
	sm.publish(m, cs, mem)
	return nil
}

// publish makes m (and cs, when non-nil) the in-memory state, with mem
// the live state as of m.
func (sm *StateMachine) publish(m smMeta, cs *pb.ConfState, mem memState) {
	sm.cur = m
	if cs != nil {
		sm.confState.Store(cs)
	}
	sm.view.Store(&view{memState: mem, rev: m.rev})
	sm.appliedIndex.Store(m.index)
	sm.revision.Store(m.rev)
	sm.oldest.Store(m.oldest)
	sm.keyspace.Store(m.size)
}

// readMeta reads the bookkeeping through r: the DB, a batch or a Pebble
// snapshot.
func readMeta(r pebble.Reader) (smMeta, *pb.ConfState, error) {
	m := smMeta{oldest: 1}
	val, closer, err := r.Get(metaAppliedKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return m, nil, fmt.Errorf("storage: read applied state: %w", err)
	default:
		m, err = decodeMeta(val)
		closer.Close()
		if err != nil {
			return m, nil, err
		}
	}
	cs := &pb.ConfState{}
	val, closer, err = r.Get(metaConfKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return m, nil, fmt.Errorf("storage: read conf state: %w", err)
	default:
		cs, err = decodeConf(val)
		closer.Close()
		if err != nil {
			return m, nil, err
		}
	}
	return m, cs, nil
}

// EventType says whether a change wrote or deleted a key.
type EventType uint8

const (
	// EventPut is a key created or updated.
	EventPut EventType = iota + 1
	// EventDelete is a key deleted (explicitly, or by session end).
	EventDelete
)

// Event is one key's change. For a delete, KV holds the key, its
// CreateRev/Version before deletion, and ModRev = the deleting revision.
type Event struct {
	Type EventType
	KV   command.KV
	// Prev is the key as it was before this change (with its value), or
	// nil when a put created it.
	Prev *command.KV
}

// Revision is every change of one revision, in the order they applied.
type Revision struct {
	Rev    int64
	Events []Event
}

// Applied is the outcome of one committed entry that carried a command.
type Applied struct {
	Index  uint64
	ID     uint64 // the command's ID (0 = nobody waits)
	Result command.Result
}

// ApplyOutput is what one Apply call produced.
type ApplyOutput struct {
	Results []Applied  // one per command entry, in log order
	Changes []Revision // the revisions these entries created, in order
	// SessionsCreated and SessionsEnded report the sessions these entries
	// opened and ended, so the member can track them without polling.
	SessionsCreated []SessionInfo
	SessionsEnded   []int64
	// MembersChanged reports that a membership change updated the
	// address book (see Members).
	MembersChanged bool
}

// AppliedIndex returns the index of the last applied entry.
func (sm *StateMachine) AppliedIndex() uint64 { return sm.appliedIndex.Load() }

// Revision returns the current cell revision.
func (sm *StateMachine) Revision() int64 { return sm.revision.Load() }

// KeyspaceBytes is the size of the live keys and values as of the applied
// state, the figure Options.QuotaBytes bounds. It reads memory only.
func (sm *StateMachine) KeyspaceBytes() int64 { return sm.keyspace.Load() }

// ConfState returns the membership as of the applied index. The caller
// owns the result.
func (sm *StateMachine) ConfState() *pb.ConfState {
	cs := sm.confState.Load()
	if cs == nil {
		return &pb.ConfState{}
	}
	return proto.CloneOf(cs)
}

// OldestRevision returns the oldest revision still in the history: the
// oldest one History can return. While the history is empty it is the
// revision the next write will create.
func (sm *StateMachine) OldestRevision() int64 { return sm.oldest.Load() }

// enter starts an operation that uses the database; the caller must call
// sm.life.RUnlock when it returns nil.
func (sm *StateMachine) enter() error {
	sm.life.RLock()
	if sm.closed {
		sm.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// drainImage waits until Pebble holds the state as of the applied index
// (see image.go). The caller holds life for reading.
func (sm *StateMachine) drainImage() error { return sm.img.drain() }

// Get returns the key, or found=false. The caller owns the value.
func (sm *StateMachine) Get(key string) (kv command.KV, found bool, err error) {
	if err := sm.enter(); err != nil {
		return kv, false, err
	}
	defer sm.life.RUnlock()
	it, ok := sm.view.Load().keys.Get(kvItem{key: key})
	if !ok {
		return kv, false, nil
	}
	kv = *it.kv
	kv.Value = bytes.Clone(kv.Value)
	return kv, true, nil
}

// List returns every key with the prefix, in key order, and the revision
// the read saw. The caller owns the values.
//
// Keys and revision come from one published view, so they are from the
// same instant without holding any lock that Apply needs.
func (sm *StateMachine) List(prefix string) ([]command.KV, int64, error) {
	if err := sm.enter(); err != nil {
		return nil, 0, err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	var (
		kvs   []command.KV
		arena valueArena
	)
	v.ascendPrefix(prefix, func(it kvItem) bool {
		kv := *it.kv
		kv.Value = arena.copy(kv.Value)
		kvs = append(kvs, kv)
		return true
	})
	return kvs, v.rev, nil
}

// iterMeta reads the meta record through it, whose bounds must include it.
func iterMeta(it *pebble.Iterator) (smMeta, error) {
	if !it.SeekGE(metaAppliedKey) || !bytes.Equal(it.Key(), metaAppliedKey) {
		if err := it.Error(); err != nil {
			return smMeta{}, fmt.Errorf("storage: read applied state: %w", err)
		}
		return smMeta{oldest: 1}, nil
	}
	val, err := it.ValueAndErr()
	if err != nil {
		return smMeta{}, fmt.Errorf("storage: read applied state: %w", err)
	}
	return decodeMeta(val)
}

// historyIter drains the image writer, so the history goes as far as the
// revisions Apply reported, and opens one iterator over the meta and the
// history with the meta it sees: bound checks made on that meta hold for
// the iterator, whatever retention pass commits meanwhile. The caller
// closes it.
func (sm *StateMachine) historyIter() (*pebble.Iterator, smMeta, error) {
	if err := sm.drainImage(); err != nil {
		return nil, smMeta{}, err
	}
	it, err := sm.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixStateMeta},
		UpperBound: []byte{prefixHistory + 1},
	})
	if err != nil {
		return nil, smMeta{}, fmt.Errorf("storage: history: %w", err)
	}
	m, err := iterMeta(it)
	if err != nil {
		it.Close()
		return nil, smMeta{}, err
	}
	return it, m, nil
}

// History returns up to limit revisions after fromRev, in order (limit <=
// 0: all of them). It returns ErrCompacted (wrapped, with the oldest
// available revision) when revisions after fromRev are no longer retained.
func (sm *StateMachine) History(fromRev int64, limit int) ([]Revision, error) {
	if err := sm.enter(); err != nil {
		return nil, err
	}
	defer sm.life.RUnlock()
	it, m, err := sm.historyIter()
	if err != nil {
		return nil, err
	}
	defer it.Close()
	fromRev = max(fromRev, 0)
	if fromRev < m.oldest-1 {
		return nil, fmt.Errorf("%w: oldest retained revision is %d", ErrCompacted, m.oldest)
	}
	if fromRev >= m.rev {
		return nil, nil
	}
	var out []Revision
	for it.SeekGE(appendHistoryKey(nil, fromRev+1)); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 || k[0] != prefixHistory {
			break
		}
		rev := int64(readUint64(k[1:]))
		if rev > m.rev {
			break
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("storage: history: %w", err)
		}
		events, err := decodeHistoryRecord(rev, bytes.Clone(val))
		if err != nil {
			return nil, err
		}
		out = append(out, Revision{Rev: rev, Events: events})
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("storage: history: %w", err)
	}
	return out, nil
}

// SessionInfo describes a live session.
type SessionInfo struct {
	ID  int64
	TTL int64 // nanoseconds
	// Unheard is how long (nanoseconds) leaders have held office without
	// hearing from the session, since one last did: the credits of older
	// builds, and the session clock's advance since its silence mark.
	Unheard int64
	// Owner is the client that created the session, "" for a member's
	// own (command.Session.Owner).
	Owner string
	// Silent is set while a leader's silence mark stands: a leader found
	// the session silent and none has heard from it since, so the
	// session clock's advance adds to Unheard.
	Silent bool
}

func sessionInfo(it sessionItem, clock int64) SessionInfo {
	return SessionInfo{ID: it.id, TTL: it.ttl, Unheard: it.unheardAt(clock), Owner: it.owner, Silent: it.marked}
}

// Sessions returns every live session, in creation order.
func (sm *StateMachine) Sessions() ([]SessionInfo, error) {
	_, out, err := sm.SessionState()
	return out, err
}

// SessionState returns the session clock (nanoseconds; see
// command.KindSessionSilent) and every live session, in creation order,
// both as of one applied index.
func (sm *StateMachine) SessionState() (clock int64, sessions []SessionInfo, err error) {
	if err := sm.enter(); err != nil {
		return 0, nil, err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	out := make([]SessionInfo, 0, v.sessions.Len())
	v.sessions.Ascend(func(it sessionItem) bool {
		out = append(out, sessionInfo(it, v.clock))
		return true
	})
	return v.clock, out, nil
}

// SessionCount returns the number of live sessions.
func (sm *StateMachine) SessionCount() int { return sm.view.Load().sessions.Len() }

// OwnerSessions returns how many live sessions owner (a client's,
// command.Session.Owner) holds in the applied state.
func (sm *StateMachine) OwnerSessions(owner string) int64 {
	return sm.view.Load().ownerSessions(owner)
}

// SessionBytes returns what the live sessions count against the quota,
// beside KeyspaceBytes.
func (sm *StateMachine) SessionBytes() int64 { return sm.view.Load().sessionBytes }

// Session returns the live session id from the applied state; ok is
// false when there is none (never created, or ended).
func (sm *StateMachine) Session(id int64) (info SessionInfo, ok bool, err error) {
	if err := sm.enter(); err != nil {
		return SessionInfo{}, false, err
	}
	defer sm.life.RUnlock()
	v := sm.view.Load()
	it, ok := v.sessions.Get(sessionItem{id: id})
	if !ok {
		return SessionInfo{}, false, nil
	}
	return sessionInfo(it, v.clock), true, nil
}

// bootstrap records cs as the membership at index 0, synced, so that a
// founding member starts from it without synthetic log entries.
func (sm *StateMachine) bootstrap(cs *pb.ConfState, members []MemberInfo) error {
	b := sm.db.NewBatch()
	defer b.Close()
	m, err := sm.bootstrapInto(b, cs, members, 0, 0)
	if err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("storage: bootstrap: %w", err)
	}
	sm.afterBootstrap(m, cs)
	return nil
}

// bootstrapInto adds to b the founding state: nothing but the membership,
// as if entries up to index (of term) had been applied.
func (sm *StateMachine) bootstrapInto(b *pebble.Batch, cs *pb.ConfState, members []MemberInfo, index, term uint64) (smMeta, error) {
	if err := sm.enter(); err != nil {
		return smMeta{}, err
	}
	defer sm.life.RUnlock()
	sm.applyMu.Lock()
	defer sm.applyMu.Unlock()
	if err := sm.drainImage(); err != nil {
		return smMeta{}, err
	}
	if sm.cur.index != 0 {
		return smMeta{}, fmt.Errorf("storage: bootstrap of a state machine that applied up to index %d", sm.cur.index)
	}
	conf, err := encodeConf(cs)
	if err != nil {
		return smMeta{}, err
	}
	m := sm.cur
	m.index, m.term = index, term
	b.Set(metaAppliedKey, appendMeta(nil, m), nil)
	b.Set(metaConfKey, conf, nil)
	for _, mem := range members {
		b.Set(memberKey(mem.ID), appendMemberRecord(nil, mem), nil)
	}
	return m, nil
}

// afterBootstrap publishes the founding state. Bootstrap writes no keys
// nor sessions, and only a state machine that applied nothing takes it,
// so the state loaded at open is still the state on disk.
func (sm *StateMachine) afterBootstrap(m smMeta, cs *pb.ConfState) {
	sm.applyMu.Lock()
	defer sm.applyMu.Unlock()
	sm.publish(m, proto.CloneOf(cs), sm.view.Load().memState)
}

// close releases the Pebble snapshots and iterators the state machine
// holds; the Store closes the database afterwards. Operations after close
// return ErrClosed.
func (sm *StateMachine) close() {
	sm.life.Lock()
	defer sm.life.Unlock()
	if sm.closed {
		return
	}
	sm.closed = true
	// What Apply queued goes to Pebble before it closes; an error is the
	// store's fault, reported already.
	_ = sm.img.close()
	sm.stageMu.Lock()
	if sm.stage.active {
		sm.dropStaging() // a staging is never resumed
	}
	sm.stageMu.Unlock()
	sm.snapMu.Lock()
	defer sm.snapMu.Unlock()
	for r := range sm.readers {
		r.release()
	}
	for idx, h := range sm.snaps {
		delete(sm.snaps, idx)
		h.unref()
	}
}

// valueArena copies values into shared slabs, so a List of many small
// keys costs a few allocations rather than one per key.
type valueArena struct{ slab []byte }

func (a *valueArena) copy(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	if len(v) > cap(a.slab)-len(a.slab) {
		a.slab = make([]byte, 0, max(len(v), 16<<10))
	}
	n := len(a.slab)
	a.slab = append(a.slab, v...)
	return a.slab[n:len(a.slab):len(a.slab)]
}
