package storage

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/lockq"
	"github.com/google/btree"
)

// The live state that Apply reads (keys, sessions, and which keys each
// session owns) is kept in memory as well as in Pebble. Reading it from
// Pebble made every prefix read walk the tombstones that lock queues
// leave behind (each acquisition writes a fresh key and deletes it on
// release), and those walks dominated the cost of a lock. Pebble stays
// the durable copy, written exactly as before; memory is rebuilt from it
// on open and when a snapshot is installed, so it holds the whole key
// space, which QuotaBytes bounds.

// kvItem is one live key. The KV it points to is never changed once the
// item is in a tree, since published trees are read without locks: a put
// inserts a new item instead.
type kvItem struct {
	key string
	kv  *command.KV // kv.Key == key; kv.Value is owned by the tree
}

// sessionItem is one live session, as its record has it.
type sessionItem struct {
	id, ttl, unheard int64
	// owner is the client that created the session ("" for a member's
	// own): see command.Session.Owner.
	owner string
	// charged is set when the session counts against the quota
	// (command.Session.Charged).
	charged bool
	// marked is set while a leader's silence mark stands (no leader has
	// heard from the session since); mark is the session clock then.
	marked bool
	mark   int64
}

// unheardAt is the session's unheard time with the session clock at
// clock: what credits added, and the clock's advance since its silence
// mark.
func (it sessionItem) unheardAt(clock int64) int64 {
	u := it.unheard
	if it.marked && clock > it.mark {
		u += clock - it.mark
	}
	return u
}

// ownerCount is how many live sessions one owner holds.
type ownerCount struct {
	owner string
	n     int64
}

// ownedItem is one entry of the session→key index.
type ownedItem struct {
	session int64
	key     string
}

func kvLess(a, b kvItem) bool { return a.key < b.key }

func sessionLess(a, b sessionItem) bool { return a.id < b.id }

func ownerLess(a, b ownerCount) bool { return a.owner < b.owner }

// ownedLess orders by session, then key, as the stored index keys sort
// (IDs big-endian, so unsigned).
func ownedLess(a, b ownedItem) bool {
	if a.session != b.session {
		return uint64(a.session) < uint64(b.session)
	}
	return a.key < b.key
}

// btreeDegree is the B-tree degree. Every Apply copies the nodes on the
// path to each item it writes (copy-on-write), so nodes are kept smaller
// than a read-only tree would want.
const btreeDegree = 16

// memState is the live state at one instant. Its trees are only written
// by the Apply that cloned them, before it publishes them; once published
// they are read-only and shared.
type memState struct {
	keys     *btree.BTreeG[kvItem]
	sessions *btree.BTreeG[sessionItem]
	owned    *btree.BTreeG[ownedItem]
	// delays indexes the lock-delay markers among keys (see lockdelay.go),
	// so the sessions leader finds them without walking every lock.
	delays *btree.BTreeG[string]
	// owners counts the sessions of each owner but members (owner ""),
	// for command.Session.MaxSessions. It is derived from the sessions,
	// never stored.
	owners *btree.BTreeG[ownerCount]
	// sessionBytes is what the charged sessions cost against the quota
	// (sessionCost); derived, never stored.
	sessionBytes int64
	// clock is the session clock (metaClockKey).
	clock int64
	// props is the proposer table (proposers.go).
	props proposerTable
}

func newMemState() memState {
	return memState{
		keys:     btree.NewG(btreeDegree, kvLess),
		sessions: btree.NewG(btreeDegree, sessionLess),
		owned:    btree.NewG(btreeDegree, ownedLess),
		delays:   btree.NewG(btreeDegree, func(a, b string) bool { return a < b }),
		owners:   btree.NewG(btreeDegree, ownerLess),
		props:    newProposerTable(),
	}
}

// clone returns a copy to write on, in O(1): the trees share their nodes
// until either side writes.
func (s memState) clone() memState {
	return memState{keys: s.keys.Clone(), sessions: s.sessions.Clone(), owned: s.owned.Clone(), delays: s.delays.Clone(),
		owners: s.owners.Clone(), sessionBytes: s.sessionBytes, clock: s.clock, props: s.props.clone()}
}

// addSession adds a new session, and counts it for its owner and, when
// charged, against the quota.
func (s *memState) addSession(it sessionItem) {
	s.sessions.ReplaceOrInsert(it)
	if it.owner != "" {
		c, _ := s.owners.Get(ownerCount{owner: it.owner})
		s.owners.ReplaceOrInsert(ownerCount{owner: it.owner, n: c.n + 1})
	}
	if it.charged {
		s.sessionBytes += sessionCost(it.ttl, it.owner)
	}
}

// removeSession removes a session that ended, undoing addSession.
func (s *memState) removeSession(it sessionItem) {
	s.sessions.Delete(it)
	if it.owner != "" {
		switch c, _ := s.owners.Get(ownerCount{owner: it.owner}); {
		case c.n > 1:
			s.owners.ReplaceOrInsert(ownerCount{owner: it.owner, n: c.n - 1})
		default:
			s.owners.Delete(c)
		}
	}
	if it.charged {
		s.sessionBytes -= sessionCost(it.ttl, it.owner)
	}
}

// ownerSessions is how many live sessions owner holds.
func (s memState) ownerSessions(owner string) int64 {
	c, _ := s.owners.Get(ownerCount{owner: owner})
	return c.n
}

// view is the state readers see: the live state as of one revision. They
// load it through one atomic pointer, so the keys and the revision they
// report always belong together.
type view struct {
	memState
	rev int64
}

// storedKV copies kv into a form the tree may keep: its own value bytes,
// and an empty value as a non-nil slice, as a record decoded from Pebble
// has it (readers see the same thing either way).
func storedKV(kv command.KV) *command.KV {
	v := make([]byte, len(kv.Value))
	copy(v, kv.Value)
	kv.Value = v
	return &kv
}

// memFirst and memEnd bound the prefixes of the records memState holds:
// one contiguous range.
const memFirst, memEnd = prefixKV, prefixSessionKey + 1

// loadMemState builds the live state from the records readable through r.
func loadMemState(r pebble.Reader) (memState, error) {
	s := newMemState()
	switch val, closer, err := r.Get(metaClockKey); {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return s, fmt.Errorf("storage: load state: %w", err)
	default:
		err := s.add(metaClockKey, val)
		closer.Close()
		if err != nil {
			return s, err
		}
	}
	if err := loadRange(r, memFirst, memEnd, s.add); err != nil {
		return s, err
	}
	// The proposer table lies past the history, which memory does not hold.
	if err := loadRange(r, prefixProposer, prefixProposer+1, s.add); err != nil {
		return s, err
	}
	s.props.settle()
	return s, nil
}

// loadRange calls add with every record whose key's first byte is in
// [first, end).
func loadRange(r pebble.Reader, first, end byte, add func(k, val []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte{first}, UpperBound: []byte{end}})
	if err != nil {
		return fmt.Errorf("storage: load state: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("storage: load state: %w", err)
		}
		if err := add(it.Key(), val); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("storage: load state: %w", err)
	}
	return nil
}

// add decodes the stored pair (k, val) into s if it is one of the records
// s holds. Neither k nor val is kept.
func (s *memState) add(k, val []byte) error {
	if len(k) == 0 {
		return nil
	}
	switch k[0] {
	case prefixProposer:
		return s.props.add(k, val)
	case prefixStateMeta:
		if bytes.Equal(k, metaClockKey) {
			c, err := decodeClock(val)
			if err != nil {
				return err
			}
			s.clock = c
		}
	case prefixKV:
		var kv command.KV
		if err := decodeKVRecord(val, &kv); err != nil {
			return fmt.Errorf("key %q: %w", k[1:], err)
		}
		kv.Key = string(k[1:])
		s.keys.ReplaceOrInsert(kvItem{key: kv.Key, kv: storedKV(kv)})
		if lockq.IsDelayMarker(kv.Key) {
			s.delays.ReplaceOrInsert(kv.Key)
		}
	case prefixSession:
		if len(k) != 9 {
			return fmt.Errorf("%w: session key %x", ErrCorrupt, k)
		}
		it := sessionItem{id: int64(readUint64(k[1:]))}
		if err := decodeSessionRecord(val, &it); err != nil {
			return err
		}
		s.addSession(it)
	case prefixSessionKey:
		if len(k) < 9 {
			return fmt.Errorf("%w: session index key %x", ErrCorrupt, k)
		}
		s.owned.ReplaceOrInsert(ownedItem{session: int64(readUint64(k[1:9])), key: string(k[9:])})
	}
	return nil
}

// ascendPrefix calls fn for every key of s under prefix, in key order,
// until fn returns false.
func (s memState) ascendPrefix(prefix string, fn func(kvItem) bool) {
	s.keys.AscendGreaterOrEqual(kvItem{key: prefix}, func(it kvItem) bool {
		if !strings.HasPrefix(it.key, prefix) {
			return false
		}
		return fn(it)
	})
}

// ownedBy returns the keys session id owns, in key order.
func (s memState) ownedBy(id int64) []string {
	var keys []string
	s.owned.AscendGreaterOrEqual(ownedItem{session: id}, func(it ownedItem) bool {
		if it.session != id {
			return false
		}
		keys = append(keys, it.key)
		return true
	})
	return keys
}
