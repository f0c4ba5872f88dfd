package storage

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Identity is who this data directory belongs to. It is local to the
// member, never replicated: each member's data directory has its own.
//
// The incarnation is drawn at random when the directory is created, so a
// member that comes back with a wiped or replaced directory speaks with a
// new one, and the members that knew the old one can tell (invariant 12
// of ARCHITECTURE.md: a member that may have lost its vote or acknowledged
// entries must not count until it has been replaced).
type Identity struct {
	// CellID names the cell the directory belongs to; 0 until known (a
	// member that joins learns it from the cell).
	CellID uint64
	// Name is the member name the directory was created for.
	Name string
	// Incarnation is this directory's random, non-zero identity.
	Incarnation uint64
}

const (
	identityVersion  = 1
	identityKey      = 'I' // prefixLocal + identityKey: the Identity record
	peerIncarnations = 'P' // prefixLocal + peerIncarnations + member ID: a peer's incarnation
)

// ErrIdentity reports an identity record this version cannot read.
var ErrIdentity = errors.New("storage: unreadable identity record")

// Identity returns the directory's identity, and false when it has none
// (a directory created before identities existed, or a new one).
func (s *Store) Identity() (Identity, bool, error) {
	val, closer, err := s.db.Get([]byte{prefixLocal, identityKey})
	if errors.Is(err, pebble.ErrNotFound) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("storage: read identity: %w", err)
	}
	defer closer.Close()
	if len(val) < 17 || val[0] != identityVersion {
		return Identity{}, false, fmt.Errorf("%w: %d bytes", ErrIdentity, len(val))
	}
	return Identity{
		CellID:      binary.BigEndian.Uint64(val[1:9]),
		Incarnation: binary.BigEndian.Uint64(val[9:17]),
		Name:        string(val[17:]),
	}, true, nil
}

// SaveIdentity records id durably. A zero Incarnation is replaced by a
// fresh random one; the saved identity is returned.
func (s *Store) SaveIdentity(id Identity) (_ Identity, err error) {
	if err := s.faults.get(); err != nil {
		return Identity{}, err
	}
	defer recoverFault(&err)
	for id.Incarnation == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return Identity{}, fmt.Errorf("storage: draw incarnation: %w", err)
		}
		id.Incarnation = binary.BigEndian.Uint64(b[:])
	}
	val := make([]byte, 0, 17+len(id.Name))
	val = append(val, identityVersion)
	val = binary.BigEndian.AppendUint64(val, id.CellID)
	val = binary.BigEndian.AppendUint64(val, id.Incarnation)
	val = append(val, id.Name...)
	if err := s.db.Set([]byte{prefixLocal, identityKey}, val, pebble.Sync); err != nil {
		return Identity{}, fmt.Errorf("storage: save identity: %w", err)
	}
	return id, nil
}

// PeerIncarnations returns the incarnation first seen from each peer,
// by Raft ID.
func (s *Store) PeerIncarnations() (map[uint64]uint64, error) {
	lo := []byte{prefixLocal, peerIncarnations}
	hi := []byte{prefixLocal, peerIncarnations + 1}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("storage: read peer incarnations: %w", err)
	}
	defer it.Close()
	out := map[uint64]uint64{}
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 10 || len(v) != 8 {
			return nil, fmt.Errorf("%w: peer incarnation record", ErrIdentity)
		}
		out[binary.BigEndian.Uint64(k[2:])] = binary.BigEndian.Uint64(v)
	}
	return out, it.Error()
}

// SavePeerIncarnation durably records the incarnation of peer id. It is
// called once per peer, on first contact, before anything that peer said
// is believed.
func (s *Store) SavePeerIncarnation(id, incarnation uint64) (err error) {
	if err := s.faults.get(); err != nil {
		return err
	}
	defer recoverFault(&err)
	key := binary.BigEndian.AppendUint64([]byte{prefixLocal, peerIncarnations}, id)
	val := binary.BigEndian.AppendUint64(nil, incarnation)
	if err := s.db.Set(key, val, pebble.Sync); err != nil {
		return fmt.Errorf("storage: save peer incarnation: %w", err)
	}
	return nil
}
