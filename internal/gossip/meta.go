// Package gossip runs a member's memberlist: it gossips who the member is
// (its Meta) and tracks what it hears of the others, alive, failed or
// gone. Gossip is a hint: nothing here changes the cell's membership; the
// autopilot on the Raft leader decides from it.
package gossip

import (
	"errors"
	"fmt"
	"github.com/coordcell/coord/internal/mpcheck"

	"github.com/vmihailenco/msgpack/v5"
)

// metaVersion leads every encoded Meta (invariant 10 of ARCHITECTURE.md).
const metaVersion byte = 1

// maxMetaSize is memberlist's MetaMaxSize: UpdateNode panics above it.
const maxMetaSize = 512

// ErrMeta reports node metadata this version cannot read, or too large.
var ErrMeta = errors.New("gossip: bad node metadata")

// Meta is what a member says of itself in gossip.
type Meta struct {
	// Cell is the cell the member belongs to, or the one it is joining;
	// 0 while it waits to found one.
	Cell uint64 `msgpack:"c"`
	// ID is the member's Raft ID.
	ID uint64 `msgpack:"i"`
	// Incarnation is its data directory's incarnation.
	Incarnation uint64 `msgpack:"n"`
	// Addr is its Raft transport address.
	Addr string `msgpack:"a"`
	// Zone is its failure domain.
	Zone string `msgpack:"z,omitempty"`
	// NoVote says it must never be promoted to voter.
	NoVote bool `msgpack:"nv,omitempty"`
	// Expect is its BootstrapExpect (0 = it never founds).
	Expect int `msgpack:"e,omitempty"`
	// Vote is the founding set it has settled on in round Round, as a
	// digest; 0 = none yet in this round.
	Vote uint64 `msgpack:"v,omitempty"`
	// Round is its founding round: it moves to the next round only once
	// its vote can no longer win, and votes at most once per round.
	Round int `msgpack:"r,omitempty"`
	// View is a digest of the members it sees waiting to found a cell;
	// it votes only once every one of them says the same view.
	View uint64 `msgpack:"w,omitempty"`
	// Leaving says it is leaving for good (Close): when it goes, it left.
	Leaving bool `msgpack:"l,omitempty"`
	// ClientAddr is the address it serves clients on, "" for none: the
	// cell's members tell clients each other's (Members). A decoder
	// that predates it ignores the field.
	ClientAddr string `msgpack:"ca,omitempty"`
}

// Encode returns m as node metadata.
func (m Meta) Encode() ([]byte, error) {
	data, err := msgpack.Marshal(&m)
	if err != nil {
		return nil, err
	}
	out := append([]byte{metaVersion}, data...)
	if len(out) > maxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d (shorten the zone or address)", ErrMeta, len(out), maxMetaSize)
	}
	return out, nil
}

// DecodeMeta reads node metadata written by Encode.
func DecodeMeta(data []byte) (Meta, error) {
	if len(data) == 0 || data[0] != metaVersion || len(data) > maxMetaSize {
		return Meta{}, fmt.Errorf("%w: %d bytes", ErrMeta, len(data))
	}
	// Metadata arrives from anyone who can gossip: refuse lengths that lie
	// before msgpack allocates for them.
	if err := mpcheck.Check(data[1:]); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrMeta, err)
	}
	var m Meta
	if err := msgpack.Unmarshal(data[1:], &m); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrMeta, err)
	}
	return m, nil
}
