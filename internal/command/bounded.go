package command

import "github.com/coordcell/coord/internal/wirebytes"

// Bounded reports whether applying the encoded command costs at most in
// proportion to its own size, so the Raft goroutine may apply it itself
// without starving its heartbeats: it deletes no prefix and ends no
// session (either may delete any number of keys). Reads inside a
// transaction count as bounded, although a prefix read may find any
// number of keys: the lock queues read their own few keys this way, and
// what the raft node reads on its own goroutine is bounded where it is
// measured, by the state machine (storage's ApplyWithin), which hands a
// batch that reads too much to the apply loop. Bounded reads the
// encoding without allocating; what it cannot read (format 1, malformed
// bytes) counts as unbounded. A session term (format 3), owner (format
// 4), lock-delay flag (format 5) or format 6's bounds and clock sit in
// the session body, which Bounded does not read. A leader's silence marks
// cost in proportion to their count; a transaction's actor and read limit
// (format 6) follow its ops, and the actor costs one session lookup per
// op (a prefix delete, unbounded anyway, scans its range once more). A
// nested transaction (format 7) counts as unbounded: its ops are not
// read here, and it is rare enough that the apply loop may take it.
func Bounded(data []byte) bool {
	if len(data) < 11 || data[0] < versionBinary2 || data[0] > Version {
		return false
	}
	kind, body := Kind(data[9]), data[10]
	switch {
	case kind == KindSessionEnd:
		return false
	case kind == KindResolve:
		return true
	case kind != KindTxn || body&bodyTxn == 0:
		return true
	case data[0] == Version: // a transaction that nests
		return false
	}
	d := wirebytes.NewMinimalReader(data[11:], ErrMalformed)
	nIf, nThen, nElse := max(d.List(minCompare), 0), max(d.List(minOp), 0), max(d.List(minOp), 0)
	for range nIf {
		d.Slice()
		d.U8()
		d.U8()
		d.Varint()
		d.View()
	}
	for range nThen + nElse {
		typ, flags := OpType(d.U8()), d.U8()
		if typ == OpDelete && flags&opPrefix != 0 {
			return false
		}
		d.Slice()
		d.View()
		d.Varint()
	}
	return d.Err() == nil
}
