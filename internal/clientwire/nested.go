package clientwire

import (
	"fmt"

	"github.com/coordcell/coord/internal/command"
)

// Nested transactions (protocol version 6): a Propose whose command nests
// transactions (command format 7) is answered with a KindNestedResult, a
// ProposeResult whose op results may hold a nested transaction's. Both
// are refused below version 6: the member answers such a command with an
// error (its result could not travel), and a client refuses to send one
// to such a member (ErrVersion), sending nothing.
const (
	KindNestedResult Kind = 27 // response (version 6)

	// NestedVersion is the first protocol version with nested
	// transactions.
	NestedVersion uint8 = 6
)

// nestsCommand reports whether encoded command data nests transactions:
// exactly the commands of format 7 or later.
func nestsCommand(data []byte) bool { return len(data) > 0 && data[0] >= 7 }

// checkNested refuses, sending nothing, a command that nests transactions
// to a member that speaks a version without them.
func (c *ClientConn) checkNested(cmd []byte) error {
	if v := c.welcome.Version; v < NestedVersion && nestsCommand(cmd) {
		return fmt.Errorf("%w: member %q speaks version %d, nested transactions need %d", ErrVersion, c.welcome.Member, v, NestedVersion)
	}
	return nil
}

// hasNested reports whether ops hold a nested transaction's result.
func hasNested(ops []command.OpResult) bool {
	for i := range ops {
		if ops[i].Txn != nil {
			return true
		}
	}
	return false
}

// appendNestedOps appends the op results of a KindNestedResult: each as
// a ProposeResult's, then a byte: 0, or 1 and the nested transaction's
// succeeded byte and op results.
func appendNestedOps(b []byte, ops []command.OpResult) []byte {
	b = appendUvarint(b, uint64(len(ops)))
	for i := range ops {
		op := &ops[i]
		b = appendKVs(b, op.KVs)
		b = appendVarint(b, op.Deleted)
		if op.Txn == nil {
			b = append(b, 0)
			continue
		}
		b = appendBool(append(b, 1), op.Txn.Succeeded)
		b = appendNestedOps(b, op.Txn.Ops)
	}
	return b
}

// nestedOps reads what appendNestedOps wrote, at depth below the top: no
// deeper than transactions nest.
func (d *dec) nestedOps(depth int) []command.OpResult {
	// An op result is at least a KV count, a number and its marker.
	n := d.Count(3)
	if n <= 0 {
		return nil
	}
	ops := make([]command.OpResult, n)
	for i := range ops {
		op := &ops[i]
		op.KVs = d.kvs()
		op.Deleted = d.Varint()
		if !d.Bool() {
			continue
		}
		if depth >= command.MaxNesting {
			d.Fail("op results nested more than %d deep", command.MaxNesting)
			return nil
		}
		op.Txn = &command.TxnResult{Succeeded: d.Bool()}
		op.Txn.Ops = d.nestedOps(depth + 1)
		if d.Err() != nil {
			return nil
		}
	}
	return ops
}
