package storage

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	pb "go.etcd.io/raft/v3/raftpb"
)

// ErrNotNew is returned by Seed on a store that already holds a cell.
var ErrNotNew = errors.New("storage: store is not new")

// Seed founds a new cell on a new store, as Bootstrap does, with kvs as
// its keys and rev as its revision: the offline restore of a backup. The
// keys keep their versions and revisions (so fencing tokens issued later
// still exceed every earlier one); none may belong to a session, since a
// new cell has none. The history starts empty after rev, so watches
// resume from rev at the oldest.
//
// The two batches it writes are not one: a caller that can crash midway
// builds the store where nobody opens it until Seed returns.
func (s *Store) Seed(cs *pb.ConfState, members []MemberInfo, kvs []command.KV, rev int64) (err error) {
	if !s.IsNew() {
		return ErrNotNew
	}
	var size int64
	for _, kv := range kvs {
		if kv.Session != 0 {
			return fmt.Errorf("storage: seed: key %q belongs to session %d", kv.Key, kv.Session)
		}
		if kv.ModRev > rev || kv.CreateRev > kv.ModRev || kv.Version < 1 {
			return fmt.Errorf("%w: seed: key %q has revisions %d..%d, version %d, at revision %d",
				ErrCorrupt, kv.Key, kv.CreateRev, kv.ModRev, kv.Version, rev)
		}
		size += int64(len(kv.Key) + len(kv.Value))
	}
	if err := s.Bootstrap(cs, members); err != nil {
		return err
	}
	defer recoverFault(&err)
	sm := s.sm
	if err := sm.enter(); err != nil {
		return err
	}
	defer sm.life.RUnlock()
	sm.applyMu.Lock()
	defer sm.applyMu.Unlock()
	if err := sm.drainImage(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	var kbuf, vbuf []byte
	for i := range kvs {
		kbuf = appendKVKey(kbuf[:0], kvs[i].Key)
		vbuf = appendKVRecord(vbuf[:0], &kvs[i])
		if err := b.Set(kbuf, vbuf, nil); err != nil {
			return fmt.Errorf("storage: seed: %w", err)
		}
	}
	m := sm.cur
	m.rev, m.size, m.oldest = rev, size, rev+1
	if err := b.Set(metaAppliedKey, appendMeta(nil, m), nil); err != nil {
		return fmt.Errorf("storage: seed: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("storage: seed: %w", err)
	}
	return sm.load()
}
