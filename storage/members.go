package storage

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/wirebytes"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The address book: every member's name and transport address, keyed by
// Raft ID, kept in the replicated state so that a restarted member, or
// one that joined by snapshot, knows how to reach everyone. Removed IDs
// leave a tombstone: Raft IDs must never be reused.

const memberFormat1 byte = 1

// MemberInfo is one member of the cell as the address book has it.
type MemberInfo struct {
	ID   uint64
	Name string
	Addr string
}

func memberKey(id uint64) []byte {
	return appendUint64([]byte{prefixStateMeta, 'm'}, id)
}

func removedKey(id uint64) []byte {
	return appendUint64([]byte{prefixStateMeta, 'x'}, id)
}

func appendMemberRecord(dst []byte, m MemberInfo) []byte {
	dst = append(dst, memberFormat1)
	dst = wirebytes.AppendString(dst, m.Name)
	return wirebytes.AppendString(dst, m.Addr)
}

func decodeMemberRecord(id uint64, b []byte) (MemberInfo, error) {
	r, err := newRecord(b, memberFormat1, "member")
	if err != nil {
		return MemberInfo{}, err
	}
	m := MemberInfo{ID: id, Name: r.Str(), Addr: r.Str()}
	return m, recordDone(&r, "member")
}

// applyConfChange records in b the address-book side of a membership
// change entry. The Raft side (ApplyConfChange) is raftnode's; both apply
// every conf change entry, so they cannot disagree.
func (a *applier) applyConfChange(e *pb.Entry) error {
	var cc pb.ConfChangeV2
	switch e.GetType() {
	case pb.EntryConfChangeV2:
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return nil // raftnode skips it too
		}
	case pb.EntryConfChange:
		var v1 pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &v1); err != nil {
			return nil
		}
		cc = *v1.AsV2()
	default:
		return nil
	}
	var m command.Member
	if dm, err := command.DecodeMember(cc.GetContext()); err == nil {
		m = *dm
	}
	for _, ch := range cc.GetChanges() {
		id := ch.GetNodeId()
		switch ch.GetType() {
		case pb.ConfChangeAddNode, pb.ConfChangeAddLearnerNode:
			if m.Name == "" {
				continue // a promotion, or a change without address: keep the record
			}
			if err := a.b.Set(memberKey(id), appendMemberRecord(nil, MemberInfo{ID: id, Name: m.Name, Addr: m.Addr}), nil); err != nil {
				return err
			}
		case pb.ConfChangeRemoveNode:
			if err := a.b.Delete(memberKey(id), nil); err != nil {
				return err
			}
			if err := a.b.Set(removedKey(id), nil, nil); err != nil {
				return err
			}
		}
	}
	a.out.MembersChanged = true
	return nil
}

// Members returns the address book.
func (sm *StateMachine) Members() ([]MemberInfo, error) {
	if err := sm.enter(); err != nil {
		return nil, err
	}
	defer sm.life.RUnlock()
	if err := sm.drainImage(); err != nil {
		return nil, err
	}
	lo := []byte{prefixStateMeta, 'm'}
	it, err := sm.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, fmt.Errorf("storage: members: %w", err)
	}
	defer it.Close()
	var out []MemberInfo
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 10 {
			return nil, fmt.Errorf("%w: member key %x", ErrCorrupt, k)
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("storage: members: %w", err)
		}
		m, err := decodeMemberRecord(readUint64(k[2:]), val)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, it.Error()
}

// WasRemoved reports whether Raft ID id belonged to a member that was
// removed: it must never be used again.
func (sm *StateMachine) WasRemoved(id uint64) (bool, error) {
	if err := sm.enter(); err != nil {
		return false, err
	}
	defer sm.life.RUnlock()
	if err := sm.drainImage(); err != nil {
		return false, err
	}
	_, closer, err := sm.db.Get(removedKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	closer.Close()
	return true, nil
}
