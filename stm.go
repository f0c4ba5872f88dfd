package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// STMIsolation is how an STM transaction's reads see the cell, and which
// concurrent writes make its commit conflict (and the transaction run
// again). The levels are etcd's concurrency.NewSTM levels, with the same
// names and meaning.
type STMIsolation int

// The isolation levels, strongest first.
const (
	// STMSerializableSnapshot (the default, as etcd's) is STMSerializable
	// that also conflicts when a key the transaction writes without
	// reading was written by another after the transaction's snapshot:
	// no transaction's write is lost under another's, even a blind one.
	STMSerializableSnapshot STMIsolation = iota
	// STMSerializable reads every key at one revision, that of the
	// transaction's first read (a snapshot), and conflicts when a key it
	// read was written since: the function sees one consistent state,
	// and the commit applies only if that state still holds for every
	// key read. A key written but never read is written blind.
	STMSerializable
	// STMRepeatableReads reads each key, once, at the current revision:
	// a key read twice reads the same, but two keys may be read at two
	// revisions, so the function can see a state that never was at one
	// revision (the commit then conflicts, as under STMSerializable,
	// when a key read has changed, and runs the function again).
	STMRepeatableReads
	// STMReadCommitted reads as STMRepeatableReads and never conflicts:
	// the writes apply whatever changed since the reads.
	STMReadCommitted
)

// String returns the level's name, as etcd spells it.
func (iso STMIsolation) String() string {
	switch iso {
	case STMSerializableSnapshot:
		return "SerializableSnapshot"
	case STMSerializable:
		return "Serializable"
	case STMRepeatableReads:
		return "RepeatableReads"
	case STMReadCommitted:
		return "ReadCommitted"
	}
	return fmt.Sprintf("STMIsolation(%d)", int(iso))
}

// STMOption changes how STM runs a transaction.
type STMOption func(*stmOptions)

type stmOptions struct {
	iso      STMIsolation
	retries  int // -1: until ctx ends
	prefetch []string
	err      error
}

// WithIsolation sets the isolation level of an STM transaction
// (default STMSerializableSnapshot). An unknown level fails the STM
// with ErrInvalidArgument.
func WithIsolation(iso STMIsolation) STMOption {
	return func(o *stmOptions) {
		if iso < STMSerializableSnapshot || iso > STMReadCommitted {
			o.err = fmt.Errorf("%w: STM isolation level %d", ErrInvalidArgument, iso)
			return
		}
		o.iso = iso
	}
}

// WithRetries bounds how often STM runs the function again after a
// conflict: after n conflicts it gives up with ErrConflict. 0 means one
// attempt; without WithRetries STM retries until its context ends. A
// negative n fails the STM with ErrInvalidArgument.
func WithRetries(n int) STMOption {
	return func(o *stmOptions) {
		if n < 0 {
			o.err = fmt.Errorf("%w: WithRetries(%d): at least 0", ErrInvalidArgument, n)
			return
		}
		o.retries = n
	}
}

// WithPrefetch reads keys, in one read, before each attempt runs the
// function: a transaction that always reads them saves a round trip per
// key (etcd's WithPrefetch).
func WithPrefetch(keys ...string) STMOption {
	return func(o *stmOptions) { o.prefetch = append(o.prefetch, keys...) }
}

// STM runs apply as a software transaction on c (etcd's
// concurrency.NewSTM): apply reads and writes through its *STMTx, whose
// writes are buffered (and read back by its own reads) until apply
// returns nil; they are then committed as one Txn, conditional on no
// conflicting write since the reads (see STMIsolation). On a conflict,
// apply runs again, from scratch, on fresh reads, until it commits, ctx
// ends, or WithRetries' bound is reached (ErrConflict). So apply may run
// more than once, and must do nothing outside its *STMTx that it cannot
// do again.
//
// STM returns the committed Txn's result (Rev is the commit's revision;
// Results holds one entry per key written, in key order). An error apply
// returns ends the STM at once, with nothing written, and is returned as
// it is. So does any read or commit error but a conflict: an
// ErrAmbiguous commit may have applied, so STM does not run apply again
// over the state it may have changed; read it and decide.
//
// Reads are linearizable. Every key read, and for
// STMSerializableSnapshot every key written, adds a comparison to the
// commit, so a transaction reads and writes at most about
// Config.MaxTxnOps/2 keys in all (ErrTooManyOps past it).
func STM(ctx context.Context, c Cell, apply func(*STMTx) error, opts ...STMOption) (TxnResult, error) {
	o := stmOptions{retries: -1}
	for _, f := range opts {
		f(&o)
	}
	if o.err != nil {
		return TxnResult{}, o.err
	}
	if apply == nil {
		return TxnResult{}, fmt.Errorf("%w: STM without a function to run", ErrInvalidArgument)
	}
	t := &STMTx{ctx: ctx, c: c, iso: o.iso, elseOK: true}
	for conflicts := 0; ; conflicts++ {
		if err := ctx.Err(); err != nil {
			return TxnResult{}, err
		}
		t.reset()
		err := t.run(apply, o.prefetch)
		if err == nil {
			var res TxnResult
			var ok bool
			res, ok, err = t.commit()
			if err == nil && ok {
				return res, nil
			}
			if err == nil {
				err = errSTMConflict
			}
		}
		if !errors.Is(err, errSTMConflict) {
			return TxnResult{}, err
		}
		if o.retries >= 0 && conflicts >= o.retries {
			return TxnResult{}, fmt.Errorf("%w: STM gave up after %d conflict(s)", ErrConflict, conflicts+1)
		}
	}
}

// errSTMConflict ends an attempt that must run again: its commit's
// comparisons failed, or its snapshot is no longer readable. It wraps
// ErrConflict, so an apply that hands it on wrapped is still seen to
// conflict.
var errSTMConflict = fmt.Errorf("%w: the transaction's reads changed; it runs again", ErrConflict)

// STMTx is one attempt of an STM transaction, handed to its function:
// its reads and writes. It is used by that one goroutine, and only until
// the function returns.
//
// A read that fails fails the attempt: its error is returned by the read,
// and by STM even if the function goes on and returns nil, so nothing is
// committed from a failed read.
type STMTx struct {
	ctx context.Context
	c   Cell
	iso STMIsolation

	// rev is the snapshot's revision (snapshot levels), 0 until the
	// first read fixes it.
	rev int64
	// reads are the keys read (absent ones with ModRev 0), as read.
	reads map[string]KV
	// writes are the buffered writes, by key; a nil op.Value with
	// deleted is a delete.
	writes map[string]stmWrite
	// prefetched holds, after a conflict under a snapshot level, the
	// keys read again by the failed commit at revision prefetchRev: the
	// next attempt's snapshot, read without a round trip.
	prefetched  map[string]KV
	prefetchRev int64
	// elseOK is false once the cell refused a commit for its size with
	// the reads added: conflicts are then read again by the next attempt.
	elseOK bool
	err    error // the attempt's first read error
}

type stmWrite struct {
	op      Op
	value   []byte
	deleted bool
}

func (t *STMTx) reset() {
	t.reads = make(map[string]KV)
	t.writes = make(map[string]stmWrite)
	t.err = nil
	t.rev = 0
	if t.prefetched != nil {
		t.rev = t.prefetchRev
	}
}

// snapshot reports whether t reads at one revision.
func (t *STMTx) snapshot() bool {
	return t.iso == STMSerializableSnapshot || t.iso == STMSerializable
}

// run runs one attempt of apply, after the prefetch.
func (t *STMTx) run(apply func(*STMTx) error, prefetch []string) error {
	if len(prefetch) > 0 {
		if err := t.fetch(prefetch); err != nil {
			return err
		}
	}
	if err := apply(t); err != nil {
		return err
	}
	return t.err
}

// Get returns key's value as the transaction sees it: its own write if
// it wrote key (nil if it deleted it), else the value read (nil for an
// absent key; Rev tells absent from empty).
func (t *STMTx) Get(key string) ([]byte, error) {
	if w, ok := t.writes[key]; ok {
		return w.value, nil
	}
	kv, err := t.read(key)
	return kv.Value, err
}

// Rev returns the revision key was last written at, as read (0: absent),
// ignoring the transaction's own writes (etcd's STM.Rev).
func (t *STMTx) Rev(key string) (int64, error) {
	kv, err := t.read(key)
	return kv.ModRev, err
}

// Put buffers a write of value under key, committed with the
// transaction. Of the write options only Ephemeral applies: a
// transaction given IfVersion fails at commit with ErrInvalidArgument
// (its reads are its conditions). Invalid keys and values fail at commit.
func (t *STMTx) Put(key string, value []byte, opts ...WriteOption) {
	t.writes[key] = stmWrite{op: OpPut(key, value, opts...), value: value}
}

// Delete buffers a delete of key, committed with the transaction.
func (t *STMTx) Delete(key string) {
	t.writes[key] = stmWrite{op: OpDelete(key), deleted: true}
}

// read returns key as read by this attempt, reading it if it was not.
func (t *STMTx) read(key string) (KV, error) {
	if t.err != nil {
		return KV{}, t.err
	}
	if kv, ok := t.reads[key]; ok {
		return kv, nil
	}
	if err := t.fetch([]string{key}); err != nil {
		return KV{}, err
	}
	return t.reads[key], nil
}

// fetch reads the keys of keys not read yet into t.reads: from the
// prefetched snapshot, at the snapshot's revision, or (the first read of
// a snapshot level, and every read of the others) as one linearizable
// read of the current state.
func (t *STMTx) fetch(keys []string) error {
	var todo []string
	for _, k := range keys {
		if _, ok := t.reads[k]; ok || slices.Contains(todo, k) {
			continue
		}
		if kv, ok := t.prefetched[k]; ok {
			t.reads[k] = kv
			continue
		}
		todo = append(todo, k)
	}
	if len(todo) == 0 {
		return nil
	}
	var err error
	if t.snapshot() && t.rev != 0 {
		err = t.readAt(todo)
	} else {
		err = t.readNow(todo)
	}
	if err != nil && t.err == nil {
		t.err = err
	}
	return err
}

// readNow reads keys at the current revision, all in one read (a
// transaction of gets), and makes that revision the snapshot's if there
// was none.
func (t *STMTx) readNow(keys []string) error {
	txn := t.c.Txn(t.ctx)
	for _, k := range keys {
		txn.Then(OpGet(k))
	}
	res, err := txn.Commit()
	if err != nil {
		return err
	}
	for i, k := range keys {
		kv := KV{Key: k}
		if kvs := res.Results[i].KVs; len(kvs) > 0 {
			kv = kvs[0]
		}
		t.reads[k] = kv
	}
	if t.snapshot() && t.rev == 0 {
		t.rev = res.Rev
	}
	return nil
}

// readAt reads keys as they were at the snapshot's revision. A snapshot
// older than the retained history cannot be read: the attempt conflicts,
// and the next one reads a new snapshot.
func (t *STMTx) readAt(keys []string) error {
	for _, k := range keys {
		kv, err := t.c.Get(t.ctx, k, WithRev(t.rev))
		switch {
		case errors.Is(err, ErrNotFound):
			kv = KV{Key: k}
		case errors.Is(err, ErrCompacted):
			t.prefetched = nil
			return fmt.Errorf("%w (snapshot at revision %d compacted: %v)", errSTMConflict, t.rev, err)
		case err != nil:
			return err
		}
		t.reads[k] = kv
	}
	return nil
}

// commit commits the attempt's writes as one Txn conditional on its
// reads; ok is false on a conflict. Under a snapshot level a conflicting
// commit reads the keys read again, in its Else branch, for the next
// attempt's snapshot.
func (t *STMTx) commit() (res TxnResult, ok bool, err error) {
	readKeys := slices.Sorted(maps.Keys(t.reads))
	writeKeys := slices.Sorted(maps.Keys(t.writes))
	var cmps []Cmp
	if t.iso != STMReadCommitted {
		for _, k := range readKeys {
			cmps = append(cmps, ModRev(k).Eq(t.reads[k].ModRev))
		}
	}
	if t.iso == STMSerializableSnapshot && t.rev != 0 {
		for _, k := range writeKeys {
			// A key read is covered by its read's comparison.
			if _, read := t.reads[k]; !read {
				cmps = append(cmps, ModRev(k).Lt(t.rev+1))
			}
		}
	}
	ops := make([]Op, len(writeKeys))
	for i, k := range writeKeys {
		ops[i] = t.writes[k].op
	}
	reread := t.snapshot() && t.elseOK && len(cmps) > 0
	if reread && len(cmps)+len(ops)+len(readKeys) > t.c.cell().limits().MaxTxnOps {
		reread = false
	}
	for {
		txn := t.c.Txn(t.ctx).If(cmps...).Then(ops...)
		if reread {
			for _, k := range readKeys {
				txn.Else(OpGet(k))
			}
		}
		res, err = txn.Commit()
		if reread && (errors.Is(err, ErrTooManyOps) || errors.Is(err, ErrReadTooLarge)) {
			// Only the rereads can make it too large (the Else ran, so the
			// comparisons failed, or a client's limits are not the
			// member's): do without them.
			t.elseOK, reread = false, false
			continue
		}
		break
	}
	t.prefetched = nil
	if err != nil || res.Succeeded {
		return res, err == nil, err
	}
	if reread {
		t.prefetched = make(map[string]KV, len(readKeys))
		for i, k := range readKeys {
			kv := KV{Key: k}
			if kvs := res.Results[i].KVs; len(kvs) > 0 {
				kv = kvs[0]
			}
			t.prefetched[k] = kv
		}
		t.prefetchRev = res.Rev
	}
	return res, false, nil
}
