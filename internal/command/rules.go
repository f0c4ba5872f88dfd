package command

import (
	"slices"
	"strings"
)

// DuplicateWrite reports the first key that ops (one branch of a
// transaction) write twice, etcd's rule: two puts of one key, a put and a
// delete of it, or a put of a key under a prefix delete. Deletes may
// overlap each other (deleting twice is deleting once). Every proposer
// refuses such a branch; the state machine refuses it in a transaction
// with a read limit (format 6), whose meaning includes the rule. It
// costs O(n log n) in the ops, whatever they are.
//
// A branch that nests transactions (OpTxn) is held to etcd's rule for
// them (nestedDuplicate), which reduces to this one for a branch without.
func DuplicateWrite(ops []Op) (key string, dup bool) {
	if slices.ContainsFunc(ops, func(op Op) bool { return op.nests() }) {
		return nestedDuplicate(ops)
	}
	if len(ops) <= smallBranch {
		return duplicateWriteSmall(ops)
	}
	return duplicateWriteSorted(ops)
}

// duplicateWriteSorted is DuplicateWrite for any number of ops.
func duplicateWriteSorted(ops []Op) (key string, dup bool) {
	var puts, deletes, prefixes []string
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Type == OpPut:
			puts = append(puts, op.Key)
		case op.Type == OpDelete && op.Prefix:
			prefixes = append(prefixes, op.Key)
		case op.Type == OpDelete:
			deletes = append(deletes, op.Key)
		}
	}
	if len(puts) == 0 {
		return "", false
	}
	slices.Sort(puts)
	for i := 1; i < len(puts); i++ {
		if puts[i] == puts[i-1] {
			return puts[i], true
		}
	}
	slices.Sort(deletes)
	// The prefix deletes not covered by a shorter one: no kept prefix is
	// a prefix of another, so the one that can cover a key is the
	// greatest kept prefix not after it.
	slices.Sort(prefixes)
	kept := prefixes[:0]
	for _, p := range prefixes {
		if len(kept) == 0 || !strings.HasPrefix(p, kept[len(kept)-1]) {
			kept = append(kept, p)
		}
	}
	for _, k := range puts {
		if _, found := slices.BinarySearch(deletes, k); found {
			return k, true
		}
		i, found := slices.BinarySearch(kept, k)
		if found || (i > 0 && strings.HasPrefix(k, kept[i-1])) {
			return k, true
		}
	}
	return "", false
}

// smallBranch is the size up to which DuplicateWrite compares every pair
// of ops, without allocating: the branches of the recipes and of most
// transactions.
const smallBranch = 8

func duplicateWriteSmall(ops []Op) (string, bool) {
	for i := range ops {
		if ops[i].Type != OpPut {
			continue
		}
		k := ops[i].Key
		for j := range ops {
			o := &ops[j]
			switch {
			case j == i:
			case o.Type == OpPut && o.Key == k,
				o.Type == OpDelete && !o.Prefix && o.Key == k,
				o.Type == OpDelete && o.Prefix && strings.HasPrefix(k, o.Key):
				return k, true
			}
		}
	}
	return "", false
}

// Writes reports whether ops write anything (a put or a delete, in a
// nested transaction's branches too).
func Writes(ops []Op) bool {
	return slices.ContainsFunc(ops, func(op Op) bool {
		if op.nests() {
			return !op.Txn.ReadOnly()
		}
		return op.Type != OpGet
	})
}

// ReadOnly reports whether t writes nothing in either branch, nested
// transactions' included: only compares and gets, which a member answers
// from its state, never through the log.
func (t *Txn) ReadOnly() bool { return !Writes(t.Then) && !Writes(t.Else) }

// PrefixReads reports whether a branch of t, or of a transaction it
// nests, reads a prefix, which can find any number of keys.
func (t *Txn) PrefixReads() bool {
	for op := range t.AllOps() {
		if op.Type == OpGet && op.Prefix {
			return true
		}
	}
	return false
}
