package storage

import (
	"errors"
	"fmt"
	"unicode/utf8"

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
//
// A member's record also holds the address it serves clients on, which
// the member itself announces with a ConfChangeUpdateNode (a change Raft
// applies as a no-op to the configuration): so every member can tell a
// client where all the others are, with or without gossip. A record is
// written in the lowest format that holds it: format 1 (name, address)
// while the member announced no client address, format 2 (and the
// client address) once it did. Both are read.
//
// An operator moves a member's transport address the same way
// (UpdateMember): a ConfChangeUpdateNode whose context names the new
// address in PeerAddr, which changes only the record's Addr.

const (
	memberFormat1 byte = 1
	memberFormat2 byte = 2
)

// MaxClientAddrLen bounds an announced client address, in bytes.
const MaxClientAddrLen = 256

// MemberInfo is one member of the cell as the address book has it.
type MemberInfo struct {
	ID   uint64
	Name string
	Addr string
	// ClientAddr is where the member serves clients, as it announced it;
	// "" while it announced none.
	ClientAddr string
}

func memberKey(id uint64) []byte {
	return appendUint64([]byte{prefixStateMeta, 'm'}, id)
}

func removedKey(id uint64) []byte {
	return appendUint64([]byte{prefixStateMeta, 'x'}, id)
}

func appendMemberRecord(dst []byte, m MemberInfo) []byte {
	format := memberFormat1
	if m.ClientAddr != "" {
		format = memberFormat2
	}
	dst = append(dst, format)
	dst = wirebytes.AppendString(dst, m.Name)
	dst = wirebytes.AppendString(dst, m.Addr)
	if format == memberFormat2 {
		dst = wirebytes.AppendString(dst, m.ClientAddr)
	}
	return dst
}

func decodeMemberRecord(id uint64, b []byte) (MemberInfo, error) {
	format := memberFormat1
	if len(b) > 0 && b[0] == memberFormat2 {
		format = memberFormat2
	}
	r, err := newRecord(b, format, "member")
	if err != nil {
		return MemberInfo{}, err
	}
	m := MemberInfo{ID: id, Name: r.Str(), Addr: r.Str()}
	if format == memberFormat2 {
		m.ClientAddr = r.Str()
		if m.ClientAddr == "" {
			return MemberInfo{}, fmt.Errorf("%w: member record format 2 without a client address", ErrCorrupt)
		}
	}
	return m, recordDone(&r, "member")
}

// ValidClientAddr reports whether a is an address the address book
// keeps: at most MaxClientAddrLen bytes of printable UTF-8 without
// spaces. What it means is the dialler's; a client checks it again.
func ValidClientAddr(a string) bool {
	if len(a) > MaxClientAddrLen || !utf8.ValidString(a) {
		return false
	}
	for _, r := range a {
		if r <= ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
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
			// A promotion names the member again: it keeps the client
			// address it announced.
			rec := MemberInfo{ID: id, Name: m.Name, Addr: m.Addr}
			if old, ok, err := a.member(id); err != nil {
				return err
			} else if ok && old.Name == m.Name {
				rec.ClientAddr = old.ClientAddr
			}
			if err := a.setMember(rec); err != nil {
				return err
			}
		case pb.ConfChangeUpdateNode:
			// A member announcing its client address, or an operator
			// moving its transport address (PeerAddr): only a member the
			// book has, under its own name, and only that field changes.
			old, ok, err := a.member(id)
			if err != nil {
				return err
			}
			if !ok || (m.Name != "" && m.Name != old.Name) {
				continue
			}
			switch {
			case m.PeerAddr != "":
				if !ValidClientAddr(m.PeerAddr) {
					continue
				}
				old.Addr = m.PeerAddr
			case !ValidClientAddr(m.ClientAddr):
				continue
			default:
				old.ClientAddr = m.ClientAddr
			}
			if err := a.setMember(old); err != nil {
				return err
			}
		case pb.ConfChangeRemoveNode:
			if err := a.b.Delete(memberKey(id), nil); err != nil {
				return err
			}
			a.forgetMember(id)
			if err := a.b.Set(removedKey(id), nil, nil); err != nil {
				return err
			}
		}
	}
	a.out.MembersChanged = true
	return nil
}

// member reads member id's record as of the entries applied so far: the
// batch's own writes first (two changes can apply in one batch), then
// the store.
func (a *applier) member(id uint64) (MemberInfo, bool, error) {
	if m, ok := a.members[id]; ok {
		return m, m.ID != 0, nil // ID 0: removed in this batch
	}
	// Earlier batches may still be on their way to Pebble (image.go).
	if err := a.sm.drainImage(); err != nil {
		return MemberInfo{}, false, err
	}
	return a.sm.member(id)
}

func (a *applier) forgetMember(id uint64) {
	if a.members == nil {
		a.members = make(map[uint64]MemberInfo)
	}
	a.members[id] = MemberInfo{}
}

// setMember writes m's record into the batch and remembers it for the
// rest of the batch.
func (a *applier) setMember(m MemberInfo) error {
	if a.members == nil {
		a.members = make(map[uint64]MemberInfo)
	}
	a.members[m.ID] = m
	return a.b.Set(memberKey(m.ID), appendMemberRecord(nil, m), nil)
}

// member reads member id's record from the store (no lock taken: the
// caller is inside the state machine).
func (sm *StateMachine) member(id uint64) (MemberInfo, bool, error) {
	val, closer, err := sm.db.Get(memberKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return MemberInfo{}, false, nil
	}
	if err != nil {
		return MemberInfo{}, false, fmt.Errorf("storage: member: %w", err)
	}
	defer closer.Close()
	m, err := decodeMemberRecord(id, val)
	return m, err == nil, err
}

// Member returns member id's record in the address book.
func (sm *StateMachine) Member(id uint64) (MemberInfo, bool, error) {
	if err := sm.enter(); err != nil {
		return MemberInfo{}, false, err
	}
	defer sm.life.RUnlock()
	if err := sm.drainImage(); err != nil {
		return MemberInfo{}, false, err
	}
	return sm.member(id)
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
