package raftnode

import (
	"iter"
	"sync"

	"github.com/coordcell/coord/storage"
)

// addressBook names the members the core knows, by Raft ID and by name.
// The core reads it to validate senders and address messages; the apply
// side updates it from the replicated state; callers read it.
type addressBook struct {
	mu      sync.RWMutex
	members map[uint64]storage.MemberInfo
	byName  map[string]uint64
}

func (b *addressBook) init() {
	b.members = make(map[uint64]storage.MemberInfo)
	b.byName = make(map[string]uint64)
}

func (b *addressBook) name(id uint64) (string, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	m, ok := b.members[id]
	return m.Name, ok
}

// addr returns the transport address the book records for member id.
func (b *addressBook) addr(id uint64) string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.members[id].Addr
}

func (b *addressBook) id(name string) (uint64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	id, ok := b.byName[name]
	return id, ok
}

// set adds or updates members and returns those whose record changed.
func (b *addressBook) set(ms iter.Seq[storage.MemberInfo]) []storage.MemberInfo {
	var changed []storage.MemberInfo
	b.mu.Lock()
	defer b.mu.Unlock()
	for m := range ms {
		old, ok := b.members[m.ID]
		if ok && old == m {
			continue
		}
		if ok && b.byName[old.Name] == m.ID {
			delete(b.byName, old.Name)
		}
		b.members[m.ID] = m
		b.byName[m.Name] = m.ID
		changed = append(changed, m)
	}
	return changed
}

// keepOnly forgets every member but self that keep does not hold, and
// returns them.
func (b *addressBook) keepOnly(keep map[uint64]bool, self string) []removedPeer {
	var gone []removedPeer
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, m := range b.members {
		if !keep[id] && m.Name != self {
			delete(b.members, id)
			if b.byName[m.Name] == id {
				delete(b.byName, m.Name)
			}
			gone = append(gone, removedPeer{name: m.Name, id: id})
		}
	}
	return gone
}
