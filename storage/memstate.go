package storage

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	"github.com/google/btree"
)

// The live keys are kept in memory as well as in Pebble. Reading them from
// Pebble made every prefix read walk the tombstones that lock queues leave
// behind (each acquisition writes a fresh key and deletes it on release),
// and those walks dominated the cost of a lock. Pebble stays the durable
// copy, written exactly as before; the tree is rebuilt from it on open and
// when a snapshot is installed, so memory holds the whole key space, which
// QuotaBytes bounds.

// kvItem is one live key. The KV it points to is never changed once the
// item is in a tree, since published trees are read without locks: a put
// inserts a new item instead.
type kvItem struct {
	key string
	kv  *command.KV // kv.Key == key; kv.Value is owned by the tree
}

func kvLess(a, b kvItem) bool { return a.key < b.key }

type kvTree = btree.BTreeG[kvItem]

// kvDegree is the B-tree degree. Every Apply copies the nodes on the path
// to each key it writes (copy-on-write), so nodes are kept smaller than
// a read-only tree would want.
const kvDegree = 16

func newKVTree() *kvTree { return btree.NewG(kvDegree, kvLess) }

// kvView is the key space as of one revision. Readers load it through one
// atomic pointer, so the keys and the revision they report always belong
// together.
type kvView struct {
	tree *kvTree
	rev  int64
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

// loadKVTree builds the tree from the KV records readable through r.
func loadKVTree(r pebble.Reader) (*kvTree, error) {
	lo := []byte{prefixKV}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, fmt.Errorf("storage: load keys: %w", err)
	}
	defer it.Close()
	tree := newKVTree()
	for it.First(); it.Valid(); it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("storage: load keys: %w", err)
		}
		if err := addKVRecord(tree, it.Key(), val); err != nil {
			return nil, err
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("storage: load keys: %w", err)
	}
	return tree, nil
}

// addKVRecord decodes the stored pair (storage key k, record val) into
// tree. Neither k nor val is kept.
func addKVRecord(tree *kvTree, k, val []byte) error {
	var kv command.KV
	if err := decodeKVRecord(val, &kv); err != nil {
		return fmt.Errorf("key %q: %w", k[1:], err)
	}
	kv.Key = string(k[1:])
	tree.ReplaceOrInsert(kvItem{key: kv.Key, kv: storedKV(kv)})
	return nil
}

// ascendPrefix calls fn for every item of tree under prefix, in key
// order, until fn returns false.
func ascendPrefix(tree *kvTree, prefix string, fn func(kvItem) bool) {
	tree.AscendGreaterOrEqual(kvItem{key: prefix}, func(it kvItem) bool {
		if !strings.HasPrefix(it.key, prefix) {
			return false
		}
		return fn(it)
	})
}
