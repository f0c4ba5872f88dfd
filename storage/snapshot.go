package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
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
	snap  *pebble.EventuallyFileOnlySnapshot
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
	// An eventually-file-only snapshot, not a plain one: an install
	// replaces the state range with an excise (snapstage.go), which a
	// plain snapshot would not survive, and it stops pinning memtables
	// once they flush.
	s := sm.db.NewEventuallyFileOnlySnapshot([]pebble.KeyRange{{Start: []byte{prefixStateFirst}, End: []byte{prefixStateEnd}}})
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
