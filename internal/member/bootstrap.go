package member

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/raftnode"
	"github.com/coordcell/coord/storage"
	pb "go.etcd.io/raft/v3/raftpb"
)

// prepareStore readies a freshly opened store for its member: it checks
// or records the data directory's identity, founds the cell when the
// store is new and the member is a founder, and returns the identity and
// the members to reach at start (the peers given, then whatever the
// replicated address book knows: it wins, having seen every change).
func prepareStore(store *storage.Store, cfg *Config) (storage.Identity, map[uint64]storage.MemberInfo, error) {
	fresh := store.IsNew()
	founding := fresh && !cfg.Join
	peers := cfg.Peers
	if len(peers) == 0 {
		peers = []Peer{{Name: cfg.Name, Addr: cfg.Addr}}
	}
	if founding && !slices.ContainsFunc(peers, func(p Peer) bool { return p.Name == cfg.Name }) {
		return storage.Identity{}, nil, fmt.Errorf("%w: Peers must include this member (%q) to found the cell; "+
			"set Join to join an existing one", errs.InvalidConfig, cfg.Name)
	}
	ident, err := loadIdentity(store, cfg, peers, fresh)
	if err != nil {
		return storage.Identity{}, nil, err
	}
	members := map[uint64]storage.MemberInfo{}
	cs := &pb.ConfState{}
	var book []storage.MemberInfo
	for _, p := range peers {
		id := raftnode.IDFromName(p.Name)
		m := storage.MemberInfo{ID: id, Name: p.Name, Addr: p.Addr}
		members[id] = m
		book = append(book, m)
		cs.Voters = append(cs.Voters, id)
	}
	if founding {
		if err := store.Bootstrap(cs, book); err != nil {
			return storage.Identity{}, nil, fmt.Errorf("%w: %w", errs.DataDir, err)
		}
	}
	known, err := store.StateMachine().Members()
	if err != nil {
		return storage.Identity{}, nil, fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	for _, m := range known {
		members[m.ID] = m
	}
	return ident, members, nil
}

// loadIdentity returns the data directory's identity, recording one if
// it has none. A directory belongs to one member name for good: opened
// under another, it is refused, since its vote and log are that member's.
func loadIdentity(store *storage.Store, cfg *Config, peers []Peer, fresh bool) (storage.Identity, error) {
	id, ok, err := store.Identity()
	if err != nil {
		return storage.Identity{}, fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	if ok {
		if id.Name != cfg.Name {
			return storage.Identity{}, fmt.Errorf("%w: the data directory belongs to member %q, not %q",
				errs.InvalidConfig, id.Name, cfg.Name)
		}
		return id, nil
	}
	// A joining member learns the cell ID from the cell. So does one whose
	// directory predates identities and that joined; a founder's is the
	// one every founder derives from the same configuration.
	var cell uint64
	if !cfg.Join {
		cell = cellID(cfg.CellName, peers)
	}
	if !fresh {
		cfg.Logger.Info("data directory had no identity; recorded one", "member", cfg.Name)
	}
	id, err = store.SaveIdentity(storage.Identity{CellID: cell, Name: cfg.Name})
	if err != nil {
		return storage.Identity{}, fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	return id, nil
}

// cellID derives the cell's ID from what every founder is given alike:
// the cell's name and its founding peers. Two cells founded with the
// same name and peers (names and addresses) get the same ID, so a user
// who founds a cell again on the addresses of an old one, while a
// process of the old one may still run, gives it a new CellName.
func cellID(name string, peers []Peer) uint64 {
	sorted := slices.SortedFunc(slices.Values(peers), func(a, b Peer) int { return cmp.Compare(a.Name, b.Name) })
	h := sha256.New()
	h.Write([]byte("coord cell v1\x00"))
	h.Write([]byte(name))
	for _, p := range sorted {
		h.Write([]byte{0})
		h.Write([]byte(p.Name))
		h.Write([]byte{0})
		h.Write([]byte(p.Addr))
	}
	if id := binary.BigEndian.Uint64(h.Sum(nil)); id != 0 {
		return id
	}
	return 1
}
