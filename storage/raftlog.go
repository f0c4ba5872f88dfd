package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Records under prefixLogMeta.
var (
	hardStateKey = []byte{prefixLogMeta, 'h'} // proto-marshalled pb.HardState
	truncatedKey = []byte{prefixLogMeta, 't'} // index (8 BE) + term (8 BE)
)

// logKeyLen is the length of an entry's key: prefix + 8-byte BE index.
const logKeyLen = 9

// RaftLog is the Raft half of the store: it implements raft.Storage over
// Pebble, with an in-memory cache of recent entries so that a leader
// replicating to followers does not read Pebble.
//
// Raft calls its read methods from the Raft goroutine; Append, Compact
// and the snapshot reset are called from that goroutine too. It is still
// safe for concurrent use (a mutex guards the in-memory state).
//
// The log is the entries (truncIndex, last]. The entry at truncIndex is
// gone (compacted, or covered by an installed snapshot) but its term is
// kept, because raft matches appends against it.
type RaftLog struct {
	db *pebble.DB
	sm stateSource

	// mu serializes every operation, including its Pebble reads and
	// writes, so the in-memory state always agrees with what Pebble holds.
	// An Append holds it across its (possibly synced) commit.
	mu         sync.Mutex
	hardState  *pb.HardState // as last persisted; nil = never written
	truncIndex uint64
	truncTerm  uint64
	cache      entryCache
	keyBuf     []byte // reused key for point reads (db.Get would copy an array to the heap)
	valBuf     []byte // reused marshalling buffer (Batch.Set copies)
	sizeBuf    []int  // reused: encoded sizes of the entries being appended

	// first and last are FirstIndex and LastIndex. They change only under
	// mu but are read atomically, so status readers asking for LastIndex
	// never wait behind an fsync in Append.
	first atomic.Uint64
	last  atomic.Uint64
}

// stateSource is what the log needs from the state machine: the conf
// state as of the applied index, and a live snapshot. *StateMachine
// implements it; tests use a fake.
type stateSource interface {
	ConfState() *pb.ConfState
	snapshot() (*pb.Snapshot, error)
}

var _ raft.Storage = (*RaftLog)(nil)

// newRaftLog loads the log's bounds and hard state from db. sm supplies
// the conf state as of the applied index (InitialState) and the live
// snapshot (Snapshot).
func newRaftLog(db *pebble.DB, opts *Options, sm stateSource) (*RaftLog, error) {
	limit := opts.EntryCacheBytes
	if limit == 0 {
		limit = defaultEntryCacheBytes // as Options documents (Store sets it; tests may not)
	}
	// A negative limit turns the cache off, so every read goes to Pebble
	// (tests use that to exercise the Pebble path).
	l := &RaftLog{db: db, sm: sm, cache: entryCache{limit: max(limit, 0)}}

	val, closer, err := db.Get(hardStateKey)
	switch {
	case err == nil:
		hs := &pb.HardState{}
		err = proto.Unmarshal(val, hs)
		closer.Close()
		if err != nil {
			return nil, fmt.Errorf("storage: decode hard state: %w", err)
		}
		l.hardState = hs
	case !errors.Is(err, pebble.ErrNotFound):
		return nil, fmt.Errorf("storage: read hard state: %w", err)
	}

	val, closer, err = db.Get(truncatedKey)
	switch {
	case err == nil:
		ok := len(val) == 16
		if ok {
			l.truncIndex, l.truncTerm = readUint64(val), readUint64(val[8:])
		}
		closer.Close()
		if !ok {
			return nil, fmt.Errorf("storage: truncated state has %d bytes, want 16", len(val))
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return nil, fmt.Errorf("storage: read truncated state: %w", err)
	}

	last, err := l.loadLastIndex()
	if err != nil {
		return nil, err
	}
	l.first.Store(l.truncIndex + 1)
	l.last.Store(last)
	return l, nil
}

// loadLastIndex finds the last persisted entry and checks that the
// entries start right after the truncation point, so a damaged log is
// refused at open rather than panicking raft later.
func (l *RaftLog) loadLastIndex() (uint64, error) {
	lower := logKey(l.truncIndex + 1)
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: lower[:],
		UpperBound: []byte{prefixLogEntry + 1},
	})
	if err != nil {
		return 0, fmt.Errorf("storage: open log iterator: %w", err)
	}
	defer it.Close()
	if !it.First() {
		if err := it.Error(); err != nil {
			return 0, fmt.Errorf("storage: scan log: %w", err)
		}
		return l.truncIndex, nil
	}
	first, err := logKeyIndex(it.Key())
	if err != nil {
		return 0, err
	}
	if first != l.truncIndex+1 {
		return 0, fmt.Errorf("storage: log starts at %d, want %d (after truncated index)", first, l.truncIndex+1)
	}
	if !it.Last() {
		return 0, fmt.Errorf("storage: scan log: %w", it.Error())
	}
	return logKeyIndex(it.Key())
}

// InitialState implements raft.Storage.
func (l *RaftLog) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.Lock()
	hs := l.hardState
	l.mu.Unlock()
	if hs == nil {
		hs = &pb.HardState{}
	} else {
		// Hand raft its own copy: we keep ours to rewrite it on reset.
		hs = proto.Clone(hs).(*pb.HardState)
	}
	return hs, pb.EnsureConfState(l.sm.ConfState()), nil
}

// Entries implements raft.Storage. Unlike raft.MemoryStorage, which
// panics, it returns an error wrapping raft.ErrUnavailable when hi is
// beyond LastIndex()+1.
func (l *RaftLog) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.last.Load()
	switch {
	case lo <= l.truncIndex:
		return nil, raft.ErrCompacted
	case hi > last+1:
		return nil, fmt.Errorf("storage: entries [%d, %d) beyond last index %d: %w", lo, hi, last, raft.ErrUnavailable)
	case last == l.truncIndex:
		// No entries at all; MemoryStorage answers the same.
		return nil, raft.ErrUnavailable
	case lo > hi:
		return nil, fmt.Errorf("storage: invalid entries range [%d, %d)", lo, hi)
	case lo == hi:
		return nil, nil
	}

	var (
		out  []*pb.Entry
		size uint64
	)
	// The cache holds a suffix of the log; anything before it is in Pebble.
	if cacheFirst := l.cache.firstIndex(last); lo < cacheFirst {
		var full bool
		var err error
		out, size, full, err = l.readEntries(lo, min(hi, cacheFirst), maxSize)
		if err != nil || full {
			return out, err
		}
		lo = cacheFirst
	}
	if lo < hi {
		out = l.cache.collect(out, lo, hi, size, maxSize)
	}
	return out, nil
}

// readEntries reads the entries [lo, hi) from Pebble, stopping before the
// entry that would take the total encoded size past maxSize (but always
// returning at least one). full reports that it stopped for size.
func (l *RaftLog) readEntries(lo, hi, maxSize uint64) (out []*pb.Entry, size uint64, full bool, err error) {
	lower, upper := logKey(lo), logKey(hi)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lower[:], UpperBound: upper[:]})
	if err != nil {
		return nil, 0, false, fmt.Errorf("storage: open log iterator: %w", err)
	}
	defer it.Close()
	// hi-lo may be huge while maxSize allows a few entries: grow as needed.
	out = make([]*pb.Entry, 0, min(hi-lo, 64))
	next := lo
	for valid := it.First(); valid; valid = it.Next() {
		idx, err := logKeyIndex(it.Key())
		if err != nil {
			return nil, 0, false, err
		}
		if idx != next {
			return nil, 0, false, fmt.Errorf("storage: log entry %d missing: %w", next, raft.ErrUnavailable)
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, 0, false, fmt.Errorf("storage: read log entry %d: %w", idx, err)
		}
		sz := uint64(len(val))
		if len(out) > 0 && size+sz > maxSize {
			return out, size, true, nil
		}
		e := &pb.Entry{}
		// Unmarshal copies Data, so the iterator's buffer may be reused.
		if err := proto.Unmarshal(val, e); err != nil {
			return nil, 0, false, fmt.Errorf("storage: decode log entry %d: %w", idx, err)
		}
		out = append(out, e)
		size += sz
		next++
	}
	if err := it.Error(); err != nil {
		return nil, 0, false, fmt.Errorf("storage: scan log: %w", err)
	}
	if next != hi {
		return nil, 0, false, fmt.Errorf("storage: log entry %d missing: %w", next, raft.ErrUnavailable)
	}
	return out, size, false, nil
}

// Term implements raft.Storage.
func (l *RaftLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch last := l.last.Load(); {
	case i == l.truncIndex:
		return l.truncTerm, nil
	case i < l.truncIndex:
		return 0, raft.ErrCompacted
	case i > last:
		return 0, raft.ErrUnavailable
	}
	return l.termLocked(i)
}

// termLocked returns the term of entry i, which must be in (truncIndex,
// last].
func (l *RaftLog) termLocked(i uint64) (uint64, error) {
	if e := l.cache.get(i, l.last.Load()); e != nil {
		return e.GetTerm(), nil
	}
	key := logKey(i)
	l.keyBuf = append(l.keyBuf[:0], key[:]...)
	val, closer, err := l.db.Get(l.keyBuf)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, fmt.Errorf("storage: log entry %d missing: %w", i, raft.ErrUnavailable)
	}
	if err != nil {
		return 0, fmt.Errorf("storage: read log entry %d: %w", i, err)
	}
	defer closer.Close()
	term, err := entryTerm(val)
	if err != nil {
		return 0, fmt.Errorf("storage: decode log entry %d: %w", i, err)
	}
	return term, nil
}

// LastIndex implements raft.Storage.
func (l *RaftLog) LastIndex() (uint64, error) { return l.last.Load(), nil }

// FirstIndex implements raft.Storage.
func (l *RaftLog) FirstIndex() (uint64, error) { return l.first.Load(), nil }

// Snapshot implements raft.Storage: it returns a snapshot of the state
// machine as of its applied index now (see StateMachine.snapshot).
func (l *RaftLog) Snapshot() (*pb.Snapshot, error) { return l.sm.snapshot() }

// Append persists hs (nil or empty = unchanged) and ents in one batch,
// replacing any persisted entries at or after ents[0].Index, and syncs
// the batch when sync is true.
//
// ents must be contiguous and start in (truncated index, LastIndex()+1];
// otherwise Append returns an error (wrapping raft.ErrCompacted or
// raft.ErrUnavailable for the two bounds) and writes nothing. Unlike
// raft.MemoryStorage it does not silently drop entries at or below the
// truncation point: raft never sends those, so they indicate a bug.
//
// The entries and hs are kept in memory by pointer, not copied: like
// raft, the caller must not mutate them afterwards.
func (l *RaftLog) Append(hs *pb.HardState, ents []*pb.Entry, sync bool) error {
	writeHS := !raft.IsEmptyHardState(hs)
	if !writeHS && len(ents) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()

	prevLast := l.last.Load()
	var firstNew, newLast uint64
	if len(ents) > 0 {
		firstNew = ents[0].GetIndex()
		newLast = firstNew + uint64(len(ents)) - 1
		if firstNew <= l.truncIndex {
			return fmt.Errorf("storage: append at %d, at or below truncated index %d: %w", firstNew, l.truncIndex, raft.ErrCompacted)
		}
		if firstNew > prevLast+1 {
			return fmt.Errorf("storage: append at %d leaves a gap after last index %d: %w", firstNew, prevLast, raft.ErrUnavailable)
		}
		for i, e := range ents {
			if e.GetIndex() != firstNew+uint64(i) {
				return fmt.Errorf("storage: append: entry %d has index %d, want %d", i, e.GetIndex(), firstNew+uint64(i))
			}
		}
	}

	b := l.db.NewBatch()
	defer b.Close()
	if len(ents) > 0 && newLast < prevLast {
		// The new entries end before the old log did: the old tail after
		// them conflicts with them and must go (raft's rule: writing entry
		// i discards every persisted entry >= i; the rest are overwritten).
		lo, hi := logKey(newLast+1), logKey(prevLast+1)
		if err := b.DeleteRange(lo[:], hi[:], nil); err != nil {
			return fmt.Errorf("storage: append: %w", err)
		}
	}
	sizes := l.sizeBuf[:0]
	for _, e := range ents {
		var err error
		l.valBuf, err = proto.MarshalOptions{}.MarshalAppend(l.valBuf[:0], e)
		if err != nil {
			return fmt.Errorf("storage: encode log entry %d: %w", e.GetIndex(), err)
		}
		key := logKey(e.GetIndex())
		if err := b.Set(key[:], l.valBuf, nil); err != nil {
			return fmt.Errorf("storage: append: %w", err)
		}
		sizes = append(sizes, len(l.valBuf))
	}
	l.sizeBuf = sizes
	if writeHS {
		if err := l.setHardState(b, hs); err != nil {
			return err
		}
	}
	if err := b.Commit(writeOpts(sync)); err != nil {
		return fmt.Errorf("storage: append: %w", err)
	}

	if writeHS {
		l.hardState = hs
	}
	if len(ents) > 0 {
		l.cache.append(ents, sizes, prevLast)
		l.last.Store(newLast)
	}
	return nil
}

// Compact discards the entries up to and including index. The caller
// guarantees index <= the durably applied index.
//
// It returns raft.ErrCompacted if index is at or below the truncation
// point, and an error wrapping raft.ErrUnavailable if index is beyond
// LastIndex (raft.MemoryStorage panics there).
func (l *RaftLog) Compact(index uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if index <= l.truncIndex {
		return raft.ErrCompacted
	}
	if last := l.last.Load(); index > last {
		return fmt.Errorf("storage: compact %d beyond last index %d: %w", index, last, raft.ErrUnavailable)
	}
	term, err := l.termLocked(index)
	if err != nil {
		return err
	}

	b := l.db.NewBatch()
	defer b.Close()
	lo, hi := logKey(l.truncIndex+1), logKey(index+1)
	if err := b.DeleteRange(lo[:], hi[:], nil); err != nil {
		return fmt.Errorf("storage: compact: %w", err)
	}
	if err := b.Set(truncatedKey, truncatedValue(index, term), nil); err != nil {
		return fmt.Errorf("storage: compact: %w", err)
	}
	// No sync: losing this in a crash only leaves the old entries (and the
	// old truncation point) in place, which is a valid log.
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("storage: compact: %w", err)
	}
	l.truncIndex, l.truncTerm = index, term
	l.cache.dropThrough(index)
	l.first.Store(index + 1)
	return nil
}

func (l *RaftLog) lastIndexNoErr() uint64 { return l.last.Load() }

// resetTo adds to b the writes that empty the log and make it start after
// meta (used when installing a snapshot).
//
// It also raises the persisted commit index to meta's index: after a
// restart raft requires commit >= the snapshot's index, and the hard
// state that would say so may only be written after the snapshot.
//
// The caller commits b and then calls afterReset, with no other log
// operation in between (both run on the raft goroutine).
func (l *RaftLog) resetTo(b *pebble.Batch, meta *pb.SnapshotMetadata) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Batch writes fail only on a closed or read-only batch, which would
	// be a bug of the caller; Commit then fails too and reports it.
	_ = b.DeleteRange([]byte{prefixLogEntry}, []byte{prefixLogEntry + 1}, nil)
	_ = b.Set(truncatedKey, truncatedValue(meta.GetIndex(), meta.GetTerm()), nil)
	if hs := l.resetHardState(meta); hs != nil {
		_ = l.setHardState(b, hs)
	}
}

// bootstrap adds to b a log that starts after meta with hard state hs.
func (l *RaftLog) bootstrap(b *pebble.Batch, meta *pb.SnapshotMetadata, hs *pb.HardState) {
	l.resetTo(b, meta)
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.setHardState(b, hs)
}

func (l *RaftLog) afterBootstrap(meta *pb.SnapshotMetadata, hs *pb.HardState) {
	l.afterReset(meta)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hardState = hs
}

// afterReset updates the in-memory state once resetTo's batch committed.
func (l *RaftLog) afterReset(meta *pb.SnapshotMetadata) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hs := l.resetHardState(meta); hs != nil {
		l.hardState = hs
	}
	l.truncIndex, l.truncTerm = meta.GetIndex(), meta.GetTerm()
	l.cache.reset()
	// Last first: a lock-free reader between the two stores then sees
	// the old first index with the new last, still a sensible range.
	l.last.Store(l.truncIndex)
	l.first.Store(l.truncIndex + 1)
}

// resetHardState returns the hard state to persist when the log is reset
// to meta, or nil if the current one already commits meta's index.
func (l *RaftLog) resetHardState(meta *pb.SnapshotMetadata) *pb.HardState {
	if l.hardState.GetCommit() >= meta.GetIndex() {
		return nil
	}
	return &pb.HardState{
		Term:   new(l.hardState.GetTerm()),
		Vote:   new(l.hardState.GetVote()),
		Commit: new(meta.GetIndex()),
	}
}

// setHardState adds hs to b, marshalled through the reused buffer.
func (l *RaftLog) setHardState(b *pebble.Batch, hs *pb.HardState) error {
	var err error
	l.valBuf, err = proto.MarshalOptions{}.MarshalAppend(l.valBuf[:0], hs)
	if err != nil {
		return fmt.Errorf("storage: encode hard state: %w", err)
	}
	if err := b.Set(hardStateKey, l.valBuf, nil); err != nil {
		return fmt.Errorf("storage: write hard state: %w", err)
	}
	return nil
}

func writeOpts(sync bool) *pebble.WriteOptions {
	if sync {
		return pebble.Sync
	}
	return pebble.NoSync
}

// logKey is the key of entry i. It returns an array, not a slice, so
// that building a key does not allocate (Batch.Set copies it).
func logKey(i uint64) [logKeyLen]byte {
	var k [logKeyLen]byte
	k[0] = prefixLogEntry
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

func logKeyIndex(key []byte) (uint64, error) {
	if len(key) != logKeyLen || key[0] != prefixLogEntry {
		return 0, fmt.Errorf("storage: malformed log key %x", key)
	}
	return readUint64(key[1:]), nil
}

func truncatedValue(index, term uint64) []byte {
	return appendUint64(appendUint64(make([]byte, 0, 16), index), term)
}

// entryTerm reads the term of a marshalled pb.Entry without decoding (and
// copying) its data: Term answers come from old entries when a follower
// lags, and those entries may be large.
func entryTerm(b []byte) (uint64, error) {
	const termField = 2 // pb.Entry.Term
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == termField && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			return v, nil
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return 0, nil // proto2: an absent term is 0
}
