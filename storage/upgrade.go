package storage

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/coordcell/coord/storage/wal"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Format 1 kept the Raft log in Pebble, under these keys; format 2 keeps
// it in a WAL of its own (walDir), and Open moves a format-1 log there.
var (
	v1HardStateKey = []byte{prefixLogMeta, 'h'} // proto-marshalled pb.HardState
	v1TruncatedKey = []byte{prefixLogMeta, 't'} // index (8 BE) + term (8 BE)
)

// walDir is the Raft log's directory inside the store's.
const walDir = "raftlog"

// upgradeV1 moves a format-1 store's Raft log out of Pebble into the
// empty WAL dir, then deletes it from Pebble and records format 2 in one
// synced batch. Until that batch, Pebble still holds the whole format-1
// store, so a crash anywhere before it leaves a directory the next Open
// upgrades again from the start (after clearing the WAL it was writing);
// after it, the WAL is complete and synced.
func upgradeV1(db *pebble.DB, fs vfs.FS, dir string, open func() (*wal.Log, error)) error {
	if err := fs.RemoveAll(dir); err != nil {
		return fmt.Errorf("storage: upgrade: clear %s: %w", dir, err)
	}
	w, err := open()
	if err != nil {
		return fmt.Errorf("storage: upgrade: %w", err)
	}
	err = copyV1Log(db, w)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("storage: upgrade: %w", err)
	}
	b := db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange([]byte{prefixLogEntry}, []byte{prefixLogMeta + 1}, nil)
	_ = b.Set([]byte{prefixFormat}, appendUint64(nil, FormatVersion), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("storage: upgrade: %w", err)
	}
	return nil
}

// copyV1Log writes the format-1 log held in db (truncation point, hard
// state, entries) to the empty log w, synced.
func copyV1Log(db *pebble.DB, w *wal.Log) error {
	var hs *pb.HardState
	val, closer, err := db.Get(v1HardStateKey)
	switch {
	case err == nil:
		hs = &pb.HardState{}
		err = proto.Unmarshal(val, hs)
		closer.Close()
		if err != nil {
			return fmt.Errorf("decode hard state: %w", err)
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("read hard state: %w", err)
	}
	var trunc, truncTerm uint64
	val, closer, err = db.Get(v1TruncatedKey)
	switch {
	case err == nil:
		ok := len(val) == 16
		if ok {
			trunc, truncTerm = readUint64(val), readUint64(val[8:])
		}
		closer.Close()
		if !ok {
			return fmt.Errorf("truncated state has %d bytes, want 16", len(val))
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("read truncated state: %w", err)
	}
	if err := w.Reset(trunc, truncTerm, hs); err != nil {
		return err
	}

	it, err := db.NewIter(&pebble.IterOptions{
		LowerBound: v1LogKey(trunc + 1),
		UpperBound: []byte{prefixLogEntry + 1},
	})
	if err != nil {
		return fmt.Errorf("open log iterator: %w", err)
	}
	defer it.Close()
	// Entries go over in batches, so a long log needs neither one frame
	// nor one sync per entry.
	const batchBytes = 1 << 20
	var (
		batch []*pb.Entry
		size  int
	)
	next := trunc + 1
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if len(key) != 9 || readUint64(key[1:]) != next {
			return fmt.Errorf("log key %x: want entry %d", key, next)
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("read log entry %d: %w", next, err)
		}
		e := &pb.Entry{}
		if err := proto.Unmarshal(val, e); err != nil {
			return fmt.Errorf("decode log entry %d: %w", next, err)
		}
		batch = append(batch, e)
		size += len(val)
		if size >= batchBytes {
			if err := w.Append(nil, batch, false); err != nil {
				return err
			}
			batch, size = batch[:0], 0
		}
		next++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan log: %w", err)
	}
	return w.Append(nil, batch, true)
}

// v1LogKey is format 1's key of entry i: prefix + 8-byte BE index.
func v1LogKey(i uint64) []byte {
	return appendUint64([]byte{prefixLogEntry}, i)
}
