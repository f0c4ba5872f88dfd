package storage

import (
	"bytes"
	"cmp"
	"strings"

	"github.com/coordcell/coord/internal/command"
)

// txn applies a transaction. Everything that can make it fail (a bad op,
// a client's write over another's session, a missing session, the quota)
// is checked before its first write, because a Pebble batch cannot take
// back a write and a failed command must change nothing (invariant 8).
func (a *applier) txn(t *command.Txn) (command.Result, error) {
	if !validTxn(t) {
		return a.status(command.StatusInvalid), nil
	}
	// Every compare on the path, a nested transaction's too, sees the
	// state before the first op (command.Plan); ops is the flat branch.
	ok, ops, plan := t.Plan(func(c *command.Compare) bool {
		kv, _, _ := a.getKV(c.Key, c.Target == command.TargetValue)
		return compare(&kv, c)
	})
	if !a.actorMay(t, ops) {
		return a.status(command.StatusForbidden), nil
	}
	if st, err := a.readLimit(t, ops); err != nil || st != command.StatusOK {
		return a.status(st), err
	}
	if st, err := a.precheck(ops); err != nil || st != command.StatusOK {
		return a.status(st), err
	}

	// All writes of the transaction share the next revision; it only
	// becomes current if something was written.
	rev := a.m.rev + 1
	res := command.Result{Succeeded: ok, Ops: a.opResults(len(ops))}
	var events []Event
	for i := range ops {
		op := &ops[i]
		r := &res.Ops[i]
		var err error
		switch {
		case op.Type == command.OpGet && op.Prefix:
			err = a.readPrefix(op.Key, r)
		case op.Type == command.OpGet:
			if kv, _, found := a.getKV(op.Key, true); found {
				err = a.charge(command.ReadCost(kv.Key, kv.Value))
				r.KVs = a.oneKV(kv)
			}
		case op.Type == command.OpPut:
			var kv command.KV
			var prev *command.KV
			kv, prev, err = a.put(op, rev)
			r.KVs = a.oneKV(kv)
			events = a.addEvent(events, Event{Type: EventPut, KV: kv, Prev: prev})
		case op.Prefix: // delete
			events, err = a.deletePrefix(op.Key, rev, events, &r.Deleted)
		default: // delete
			events, err = a.deleteKey(op.Key, rev, events, &r.Deleted)
		}
		if err != nil {
			return command.Result{}, err
		}
	}
	if len(events) > 0 {
		if err := a.newRevision(events); err != nil {
			return command.Result{}, err
		}
	}
	res.Rev = a.m.rev
	res.Ops = plan.Nest(res.Ops)
	return res, nil
}

// readLimit decides, before anything is written, whether the gets of ops
// (the branch of t that runs) fit in t's read limit (format 6), counted
// by branchReadCost. The count is charged to the call's budget like any
// read: an inline apply that would count past its budget stops before
// it knows the answer (ErrApplyBudget), and the apply loop counts again.
func (a *applier) readLimit(t *command.Txn, ops []command.Op) (command.Status, error) {
	if t.ReadLimit <= 0 {
		return command.StatusOK, nil
	}
	stop := t.ReadLimit
	if a.budget > 0 {
		stop = min(stop, max(a.budget-a.spent, 0))
	}
	cost := branchReadCost(a.mem, ops, stop)
	if cost > t.ReadLimit {
		return command.StatusReadTooLarge, a.charge(cost)
	}
	return command.StatusOK, a.charge(cost)
}

// readPrefix reads every key under prefix into r, as of the entries
// applied so far, charging each to the call's budget. The values are
// copied: they leave the state machine in the result.
func (a *applier) readPrefix(prefix string, r *command.OpResult) error {
	var arena valueArena
	var err error
	a.mem.ascendPrefix(prefix, func(it kvItem) bool {
		if err = a.charge(command.ReadCost(it.key, it.kv.Value)); err != nil {
			return false
		}
		kv := *it.kv
		kv.Value = arena.copy(kv.Value)
		r.KVs = append(r.KVs, kv)
		return true
	})
	return err
}

// charge counts cost against the call's read budget (ApplyWithin); past
// it, the call must stop: ErrApplyBudget.
func (a *applier) charge(cost int64) error {
	if a.budget <= 0 {
		return nil
	}
	a.spent += cost
	if a.spent > a.budget {
		return ErrApplyBudget
	}
	return nil
}

// validTxn checks what the proposer checked: known compares and ops and,
// in a transaction with a read limit (format 6, whose meaning includes the
// rule) or one that nests (format 7, likewise), no branch writing a key
// twice (etcd's rule, nested transactions' writes counted:
// command.DuplicateWrite). Older formats keep their meaning (the last
// write of a key wins), so logs and members before the rule apply alike.
func validTxn(t *command.Txn) bool {
	if t.ReadLimit > 0 || t.Nests() {
		if _, dup := command.DuplicateWrite(t.Then); dup {
			return false
		}
		if _, dup := command.DuplicateWrite(t.Else); dup {
			return false
		}
	}
	return validBody(t)
}

// validBody checks t's compares and ops, and those of the transactions
// it nests (which the decoder bounds to command.MaxNesting).
func validBody(t *command.Txn) bool {
	for _, c := range t.If {
		if c.Target < command.TargetVersion || c.Target > command.TargetSession ||
			c.Op < command.Equal || c.Op > command.Greater {
			return false
		}
	}
	for _, ops := range [2][]command.Op{t.Then, t.Else} {
		for i := range ops {
			op := &ops[i]
			if op.Type == command.OpTxn && op.Txn != nil {
				if !validBody(op.Txn) {
					return false
				}
				continue
			}
			if op.Type < command.OpGet || op.Type > command.OpDelete ||
				op.Type == command.OpPut && op.Prefix {
				return false
			}
		}
	}
	return true
}

// compare evaluates c against kv (the zero KV for an absent key).
func compare(kv *command.KV, c *command.Compare) bool {
	var r int
	switch c.Target {
	case command.TargetValue:
		r = bytes.Compare(kv.Value, c.Value)
	case command.TargetVersion:
		r = cmp.Compare(kv.Version, c.Int)
	case command.TargetCreateRev:
		r = cmp.Compare(kv.CreateRev, c.Int)
	case command.TargetModRev:
		r = cmp.Compare(kv.ModRev, c.Int)
	case command.TargetSession:
		r = cmp.Compare(kv.Session, c.Int)
	}
	switch c.Op {
	case command.Equal:
		return r == 0
	case command.NotEqual:
		return r != 0
	case command.Less:
		return r < 0
	case command.Greater:
		return r > 0
	}
	return false
}

// precheck decides whether ops may run: every ephemeral put's session
// must exist, and the keyspace must not grow past the quota (which the
// charged sessions share).
func (a *applier) precheck(ops []command.Op) (command.Status, error) {
	var grow int64
	for i := range ops {
		op := &ops[i]
		if op.Type != command.OpPut {
			continue
		}
		if op.Session != 0 && !a.hasSession(op.Session) {
			return command.StatusNoSession, nil
		}
		grow += int64(len(op.Key) + len(op.Value))
	}
	// No transaction grows the keyspace by more than the sum of its puts,
	// so the exact (and costlier) reckoning is only needed near the quota.
	if a.used()+grow <= a.sm.opts.QuotaBytes {
		return command.StatusOK, nil
	}
	delta, err := a.sizeDelta(ops)
	if err != nil {
		return command.StatusOK, err
	}
	if delta > 0 && a.used()+delta > a.sm.opts.QuotaBytes {
		return command.StatusQuotaExceeded, nil
	}
	return command.StatusOK, nil
}

// sizeDelta computes, without writing, by how much ops would change the
// keyspace size.
func (a *applier) sizeDelta(ops []command.Op) (int64, error) {
	// The size of each key ops touched, after the ops so far; -1 = absent.
	after := make(map[string]int64)
	sizeOf := func(key string) int64 {
		if s, ok := after[key]; ok {
			return s
		}
		if _, s, found := a.getKV(key, false); found {
			return s
		}
		return -1
	}
	var delta int64
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Type == command.OpPut:
			old := sizeOf(op.Key)
			delta += int64(len(op.Key)+len(op.Value)) - max(old, 0)
			after[op.Key] = int64(len(op.Key) + len(op.Value))
		case op.Type == command.OpDelete && op.Prefix:
			for k, s := range after {
				if s >= 0 && strings.HasPrefix(k, op.Key) {
					delta -= s
					after[k] = -1
				}
			}
			err := a.scan(op.Key, func(kv *command.KV) error {
				if _, seen := after[kv.Key]; !seen {
					delta -= int64(len(kv.Key) + len(kv.Value))
					after[kv.Key] = -1
				}
				return nil
			})
			if err != nil {
				return 0, err
			}
		case op.Type == command.OpDelete:
			if old := sizeOf(op.Key); old >= 0 {
				delta -= old
				after[op.Key] = -1
			}
		}
	}
	return delta, nil
}

// put writes op at revision rev and returns the key as written.
func (a *applier) put(op *command.Op, rev int64) (command.KV, *command.KV, error) {
	old, oldSize, found := a.getKV(op.Key, true)
	kv := command.KV{
		Key: op.Key, Value: op.Value,
		Version: 1, CreateRev: rev, ModRev: rev, Session: op.Session,
	}
	if found {
		kv.Version = old.Version + 1
		kv.CreateRev = old.CreateRev
		a.m.size -= oldSize
	}
	a.m.size += int64(len(op.Key) + len(op.Value))
	a.vbuf = appendKVRecord(a.vbuf[:0], &kv)
	if err := a.b.Set(a.kbuf, a.vbuf, nil); err != nil {
		return command.KV{}, nil, err
	}
	a.setKV(&kv)
	if old.Session != kv.Session {
		if err := a.setOwner(old.Session, kv.Session, op.Key); err != nil {
			return command.KV{}, nil, err
		}
	}
	if !found {
		return kv, nil, nil
	}
	return kv, &old, nil
}

// setOwner moves key's entry in the session→key index from session from
// to session to (0 = none).
func (a *applier) setOwner(from, to int64, key string) error {
	if from != 0 {
		a.ibuf = appendOwnedKey(a.ibuf[:0], from, key)
		if err := a.b.Delete(a.ibuf, nil); err != nil {
			return err
		}
		a.mem.owned.Delete(ownedItem{session: from, key: key})
	}
	if to != 0 {
		a.ibuf = appendOwnedKey(a.ibuf[:0], to, key)
		if err := a.b.Set(a.ibuf, nil, nil); err != nil {
			return err
		}
		a.mem.owned.ReplaceOrInsert(ownedItem{session: to, key: key})
	}
	return nil
}

// deleteKey deletes key, if present, at revision rev.
func (a *applier) deleteKey(key string, rev int64, events []Event, deleted *int64) ([]Event, error) {
	kv, size, found := a.getKV(key, true)
	if !found {
		return events, nil
	}
	if err := a.b.Delete(a.kbuf, nil); err != nil {
		return events, err
	}
	a.deleteKV(key)
	if err := a.setOwner(kv.Session, 0, key); err != nil {
		return events, err
	}
	a.m.size -= size
	prev := kv
	kv.Value, kv.ModRev = nil, rev
	*deleted++
	return a.addEvent(events, Event{Type: EventDelete, KV: kv, Prev: &prev}), nil
}

// deletePrefix deletes every key under prefix at revision rev.
func (a *applier) deletePrefix(prefix string, rev int64, events []Event, deleted *int64) ([]Event, error) {
	type victim struct {
		kv   command.KV
		size int64
	}
	// Collected first, so that the events are built from the keys as they
	// were before any of these deletions.
	var doomed []victim
	var arena valueArena
	err := a.scan(prefix, func(kv *command.KV) error {
		size := int64(len(kv.Key) + len(kv.Value))
		kv.Value = arena.copy(kv.Value)
		doomed = append(doomed, victim{*kv, size})
		return nil
	})
	if err != nil {
		return events, err
	}
	for i := range doomed {
		kv := doomed[i].kv
		a.kbuf = appendKVKey(a.kbuf[:0], kv.Key)
		if err := a.b.Delete(a.kbuf, nil); err != nil {
			return events, err
		}
		a.deleteKV(kv.Key)
		if err := a.setOwner(kv.Session, 0, kv.Key); err != nil {
			return events, err
		}
		a.m.size -= doomed[i].size
		prev := kv
		kv.Value, kv.ModRev = nil, rev
		events = append(events, Event{Type: EventDelete, KV: kv, Prev: &prev})
	}
	*deleted += int64(len(doomed))
	return events, nil
}
