package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/wirebytes"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrSnapshotChunk is returned by StageChunk for a chunk that does not
// decode, arrives out of order, or belongs to another snapshot than the
// one being staged. The chunk is ignored.
var ErrSnapshotChunk = errors.New("storage: bad snapshot chunk")

// maxHeldSnapshots bounds the Pebble snapshots kept for OpenSnapshot. Each
// pins the files of its instant, so they are few and the oldest goes first.
const maxHeldSnapshots = 4

// A snapshot is sent as the state range itself. A chunk is chunkFormat1
// followed by pairs (uvarint key length, key, uvarint value length,
// value), in key order. pb.Snapshot.Data is only a header: snapDataFormat1
// and the revision, so that Raft messages stay small.

// heldSnapshot is a Pebble snapshot kept for OpenSnapshot.
type heldSnapshot struct {
	snap  *pebble.Snapshot
	index uint64
	seq   uint64 // creation order, to evict the oldest
	refs  int    // the map's and each open reader's; guarded by snapMu
}

func (h *heldSnapshot) unref() error {
	h.refs--
	if h.refs == 0 {
		return h.snap.Close()
	}
	return nil
}

// snapshot returns a raft snapshot of the state as of the applied index
// now, and keeps a Pebble snapshot of it open for OpenSnapshot.
//
// The metadata is read from the Pebble snapshot itself, not from memory,
// so it describes exactly the state a reader will stream even if Apply
// commits meanwhile.
func (sm *StateMachine) snapshot() (*pb.Snapshot, error) {
	if err := sm.enter(); err != nil {
		return nil, err
	}
	defer sm.life.RUnlock()
	if err := sm.drainImage(); err != nil {
		return nil, err
	}
	s := sm.db.NewSnapshot()
	m, cs, err := readMeta(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	if m.index == 0 {
		s.Close()
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	sm.snapMu.Lock()
	sm.snapSeq++
	h := &heldSnapshot{snap: s, index: m.index, seq: sm.snapSeq, refs: 1}
	if old, ok := sm.snaps[m.index]; ok {
		old.unref()
	}
	sm.snaps[m.index] = h
	for len(sm.snaps) > maxHeldSnapshots {
		var oldest *heldSnapshot
		for _, o := range sm.snaps {
			if oldest == nil || o.seq < oldest.seq {
				oldest = o
			}
		}
		delete(sm.snaps, oldest.index)
		oldest.unref()
	}
	sm.snapMu.Unlock()
	return &pb.Snapshot{
		Data: binary.AppendUvarint([]byte{snapDataFormat1}, uint64(m.rev)),
		Metadata: &pb.SnapshotMetadata{
			Index:     new(m.index),
			Term:      new(m.term),
			ConfState: cs,
		},
	}, nil
}

func decodeSnapData(data []byte) (rev int64, err error) {
	r, err := newRecord(data, snapDataFormat1, "snapshot header")
	if err != nil {
		return 0, err
	}
	rev = int64(r.Uvarint())
	return rev, recordDone(&r, "snapshot header")
}

// SnapshotReader yields a snapshot's state in chunks.
type SnapshotReader interface {
	// Next returns the next chunk, or io.EOF after the last.
	Next() ([]byte, error)
	Close() error
}

// OpenSnapshot returns a reader of the state captured by the snapshot()
// call that returned index; false if none is held for that index.
//
// Closing the reader releases the Pebble snapshot unless another reader
// of it is still open: a snapshot is taken for one transfer, and a later
// transfer asks Raft, which takes a fresh one.
func (sm *StateMachine) OpenSnapshot(index uint64) (SnapshotReader, bool) {
	if err := sm.enter(); err != nil {
		return nil, false
	}
	defer sm.life.RUnlock()
	sm.snapMu.Lock()
	defer sm.snapMu.Unlock()
	h, ok := sm.snaps[index]
	if !ok {
		return nil, false
	}
	h.refs++
	r := &snapReader{sm: sm, h: h}
	sm.readers[r] = struct{}{}
	return r, true
}

// snapReader streams a held snapshot. It is not safe for concurrent use.
type snapReader struct {
	sm       *StateMachine
	h        *heldSnapshot
	it       *pebble.Iterator
	done     bool
	released bool // set under snapMu, by Close or the state machine's close
}

// Next returns the next chunk: at most the chunk size, except that a
// single pair larger than that travels alone in an oversized chunk. There
// is always at least one chunk. The caller owns it.
func (r *snapReader) Next() ([]byte, error) {
	if err := r.sm.enter(); err != nil {
		return nil, err
	}
	defer r.sm.life.RUnlock()
	if r.released {
		return nil, ErrClosed
	}
	if r.done {
		return nil, io.EOF
	}
	if r.it == nil {
		it, err := r.h.snap.NewIter(&pebble.IterOptions{
			LowerBound: []byte{prefixStateFirst},
			UpperBound: []byte{prefixStateEnd},
		})
		if err != nil {
			return nil, fmt.Errorf("storage: read snapshot: %w", err)
		}
		r.it = it
		it.First()
	}
	limit := r.sm.chunkSize
	chunk := make([]byte, 1, min(limit, 64<<10))
	chunk[0] = chunkFormat1
	for ; r.it.Valid(); r.it.Next() {
		k := r.it.Key()
		v, err := r.it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("storage: read snapshot: %w", err)
		}
		n := uvarintLen(len(k)) + len(k) + uvarintLen(len(v)) + len(v)
		if len(chunk) > 1 && len(chunk)+n > limit {
			return chunk, nil // resume at this pair next time
		}
		chunk = binary.AppendUvarint(chunk, uint64(len(k)))
		chunk = append(chunk, k...)
		chunk = binary.AppendUvarint(chunk, uint64(len(v)))
		chunk = append(chunk, v...)
	}
	if err := r.it.Error(); err != nil {
		return nil, fmt.Errorf("storage: read snapshot: %w", err)
	}
	r.done = true
	return chunk, nil
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// Close ends the transfer. Closing twice, or after the state machine
// closed, is a no-op.
func (r *snapReader) Close() error {
	r.sm.life.RLock()
	defer r.sm.life.RUnlock()
	r.sm.snapMu.Lock()
	defer r.sm.snapMu.Unlock()
	if r.released {
		return nil
	}
	err := r.release()
	if h := r.h; r.sm.snaps[h.index] == h && h.refs == 1 {
		delete(r.sm.snaps, h.index)
		err = errors.Join(err, h.unref())
	}
	return err
}

// release drops the reader's hold on its snapshot. snapMu must be held.
func (r *snapReader) release() error {
	r.released = true
	delete(r.sm.readers, r)
	var err error
	if r.it != nil {
		err = r.it.Close()
		r.it = nil
	}
	return errors.Join(err, r.h.unref())
}

// stagingState tracks the snapshot being received. The staged pairs
// themselves are in Pebble under prefixStaging, so a large snapshot does
// not have to fit in memory.
type stagingState struct {
	active      bool
	index, term uint64
	next        int // the seq expected next
	complete    bool
}

// StageChunk stores chunk seq of the snapshot at index/term being received.
//
// Chunk 0 starts a new staging, discarding whatever was staged before;
// later chunks must follow in order for the same index and term. A chunk
// that does not (or does not decode) returns ErrSnapshotChunk and is
// ignored.
func (sm *StateMachine) StageChunk(index, term uint64, seq int, data []byte, last bool) error {
	if err := sm.enter(); err != nil {
		return err
	}
	defer sm.life.RUnlock()
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	st := &sm.stage
	switch {
	case seq < 0:
		return fmt.Errorf("%w: negative sequence %d", ErrSnapshotChunk, seq)
	case seq == 0:
	case !st.active || st.index != index || st.term != term:
		return fmt.Errorf("%w: chunk %d of snapshot %d/%d, but none of it is staged",
			ErrSnapshotChunk, seq, index, term)
	case st.complete:
		return fmt.Errorf("%w: chunk %d of snapshot %d/%d after its last chunk",
			ErrSnapshotChunk, seq, index, term)
	case seq != st.next:
		return fmt.Errorf("%w: chunk %d of snapshot %d/%d, want chunk %d",
			ErrSnapshotChunk, seq, index, term, st.next)
	}
	b := sm.db.NewBatch()
	defer b.Close()
	if seq == 0 {
		if err := b.DeleteRange([]byte{prefixStaging}, []byte{prefixStaging + 1}, nil); err != nil {
			return fmt.Errorf("storage: stage snapshot: %w", err)
		}
	}
	if err := stagePairs(b, data); err != nil {
		return fmt.Errorf("%w (chunk %d of snapshot %d/%d)", err, seq, index, term)
	}
	// Not synced: staging that a crash loses is restarted from chunk 0,
	// and the install itself is a synced write.
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("storage: stage snapshot: %w", err)
	}
	if seq == 0 {
		*st = stagingState{active: true, index: index, term: term}
	}
	st.next = seq + 1
	st.complete = last
	return nil
}

// stagePairs decodes a chunk into b. It checks the whole chunk: any error
// leaves b unusable, and the caller drops it.
func stagePairs(b *pebble.Batch, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrSnapshotChunk)
	}
	if data[0] != chunkFormat1 {
		return fmt.Errorf("%w: %w: chunk format %d", ErrSnapshotChunk, ErrFormat, data[0])
	}
	r := wirebytes.NewReader(data[1:], ErrCorrupt)
	var key []byte
	for r.Len() > 0 {
		k, v := r.Slice(), r.Slice()
		if r.Err() != nil {
			return fmt.Errorf("%w: truncated pair", ErrSnapshotChunk)
		}
		// Installing copies staged pairs to their original keys; a key
		// outside the state range could overwrite the Raft log.
		if len(k) == 0 || k[0] < prefixStateFirst || k[0] >= prefixStateEnd {
			return fmt.Errorf("%w: key %x outside the state range", ErrSnapshotChunk, k)
		}
		key = append(append(key[:0], prefixStaging), k...)
		if err := b.Set(key, v, nil); err != nil {
			return err
		}
	}
	return nil
}

// StagedComplete reports whether every chunk of the snapshot at index/term arrived.
func (sm *StateMachine) StagedComplete(index, term uint64) bool {
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	st := &sm.stage
	return st.active && st.complete && st.index == index && st.term == term
}

// installStaged adds to b the writes that replace the state with the
// staged snapshot snap: the state range is cleared, the staged pairs move
// to their keys, and the applied index, term and conf state become snap's.
// The live state is decoded on the way, for afterInstall to publish, so a
// snapshot with a record this node cannot read is refused here rather
// than installed.
func (sm *StateMachine) installStaged(b *pebble.Batch, snap *pb.Snapshot) error {
	if err := sm.enter(); err != nil {
		return err
	}
	defer sm.life.RUnlock()
	// A batch still queued would land on top of the installed state.
	if err := sm.drainImage(); err != nil {
		return err
	}
	meta := snap.GetMetadata()
	index, term := meta.GetIndex(), meta.GetTerm()
	rev, err := decodeSnapData(snap.GetData())
	if err != nil {
		return fmt.Errorf("storage: install snapshot %d/%d: %w", index, term, err)
	}
	conf, err := encodeConf(meta.GetConfState())
	if err != nil {
		return err
	}
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	if st := &sm.stage; !st.active || !st.complete || st.index != index || st.term != term {
		return fmt.Errorf("%w: snapshot %d/%d", ErrSnapshotIncomplete, index, term)
	}

	stLo, stHi := []byte{prefixStaging}, []byte{prefixStaging + 1}
	it, err := sm.db.NewIter(&pebble.IterOptions{LowerBound: stLo, UpperBound: stHi})
	if err != nil {
		return fmt.Errorf("storage: install snapshot: %w", err)
	}
	defer it.Close()
	if err := b.DeleteRange([]byte{prefixStateFirst}, []byte{prefixStateEnd}, nil); err != nil {
		return fmt.Errorf("storage: install snapshot: %w", err)
	}
	var (
		m       smMeta
		sawMeta bool
		mem     = newMemState()
		memErr  error // the first record of the live state that does not decode
	)
	for it.First(); it.Valid(); it.Next() {
		orig := it.Key()[1:]
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("storage: install snapshot: %w", err)
		}
		switch {
		case bytes.Equal(orig, metaAppliedKey):
			if m, err = decodeMeta(val); err != nil {
				return fmt.Errorf("storage: install snapshot %d/%d: %w", index, term, err)
			}
			if m.index != index || m.term != term || m.rev != rev {
				return fmt.Errorf("%w: staged state is at index %d term %d revision %d, snapshot %d/%d says revision %d",
					ErrCorrupt, m.index, m.term, m.rev, index, term, rev)
			}
			sawMeta = true
		case bytes.Equal(orig, metaConfKey):
			// Replaced below by the metadata's, which Raft goes by.
			continue
		case memErr == nil:
			memErr = mem.add(orig, val)
		}
		if err := b.Set(orig, val, nil); err != nil {
			return fmt.Errorf("storage: install snapshot: %w", err)
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("storage: install snapshot: %w", err)
	}
	if !sawMeta {
		return fmt.Errorf("%w: snapshot %d/%d has no applied state", ErrCorrupt, index, term)
	}
	if memErr != nil {
		return fmt.Errorf("storage: install snapshot %d/%d: %w", index, term, memErr)
	}
	mem.props.settle()
	if err := b.Set(metaConfKey, conf, nil); err != nil {
		return fmt.Errorf("storage: install snapshot: %w", err)
	}
	if err := b.DeleteRange(stLo, stHi, nil); err != nil {
		return fmt.Errorf("storage: install snapshot: %w", err)
	}
	sm.installed, sm.installedMem = m, mem
	return nil
}

// afterInstall makes the installed snapshot the in-memory state, once
// installStaged's batch committed.
func (sm *StateMachine) afterInstall(snap *pb.Snapshot) {
	if err := sm.enter(); err != nil {
		return
	}
	defer sm.life.RUnlock()
	sm.applyMu.Lock()
	defer sm.applyMu.Unlock()
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	m, cs, err := readMeta(sm.db)
	if err != nil {
		// The batch committed, so the disk is right; memory falls back on
		// what installStaged wrote rather than keeping the old state.
		sm.opts.Logger.Error("storage: reload state after snapshot install", "err", err)
		m, cs = sm.installed, proto.CloneOf(snap.GetMetadata().GetConfState())
	}
	mem := sm.installedMem
	if mem.keys == nil {
		// installStaged always leaves the state it wrote; should it not
		// have, the disk has it.
		if mem, err = loadMemState(sm.db); err != nil {
			sm.opts.Logger.Error("storage: reload state after snapshot install", "err", err)
			mem = newMemState()
		}
	}
	sm.publish(m, cs, mem)
	sm.installedMem = memState{}
	sm.stage = stagingState{}
}
