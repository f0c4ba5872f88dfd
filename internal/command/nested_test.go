package command

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func put(k string) Op             { return Op{Type: OpPut, Key: k} }
func del(k string) Op             { return Op{Type: OpDelete, Key: k} }
func delPrefix(k string) Op       { return Op{Type: OpDelete, Key: k, Prefix: true} }
func get(k string) Op             { return Op{Type: OpGet, Key: k} }
func then(ops ...Op) Op           { return Op{Type: OpTxn, Txn: &Txn{Then: ops}} }
func both(t, e []Op) Op           { return Op{Type: OpTxn, Txn: &Txn{Then: t, Else: e}} }
func ops(o ...Op) []Op            { return o }
func cmpVersion(k string) Compare { return Compare{Key: k, Target: TargetVersion, Op: Equal} }

// TestNestedDuplicateAsEtcd runs etcd's TestV3TxnDuplicateKeys cases
// (tests/integration/v3_grpc_test.go), a range [a, b) being a prefix
// delete of "a" and [abb, abc) the key "abb", and the cases its
// checkIntervals decides that those do not reach.
func TestNestedDuplicateAsEtcd(t *testing.T) {
	putreq, delKey, delIn, delOut := put("abc"), del("abc"), delPrefix("a"), del("abb")
	for name, tc := range map[string]struct {
		branch []Op
		dup    bool
	}{
		"put, put":                                         {ops(putreq, putreq), true},
		"put, delete":                                      {ops(putreq, delKey), true},
		"put, delete in range":                             {ops(putreq, delIn), true},
		"Then(Put(a), Then(Del(a)))":                       {ops(putreq, then(delIn)), true},
		"Then(Del(a), Then(Put(a)))":                       {ops(delIn, then(putreq)), true},
		"two-sided puts twice":                             {ops(both(ops(putreq), ops(putreq)), both(ops(putreq), ops(putreq))), true},
		"Then(Del(x), (Then(Put(a)), Else(Put(a))))":       {ops(delOut, both(ops(putreq), ops(putreq))), false},
		"Then(Then(Del(a)), (Then(Del(a)), Else(Del(a))))": {ops(then(delIn), both(ops(delIn), ops(delIn))), false},
		"deletes overlap":                                  {ops(delKey, delIn, delKey, delIn), false},
		"put, delete out of range":                         {ops(putreq, delOut), false},
		// What checkIntervals decides beyond etcd's table.
		"nested then puts, else deletes":   {ops(both(ops(put("k")), ops(del("k")))), false},
		"earlier put, later nested delete": {ops(then(put("k")), then(del("k"))), false},
		"earlier nested delete, later put": {ops(then(del("k")), then(put("k"))), true},
		"nested put, put after":            {ops(then(put("k")), put("k")), true},
		"nested put twice in a branch":     {ops(then(put("k"), put("k"))), true},
		"deep put under a top prefix":      {ops(delPrefix("p/"), then(then(put("p/x")))), true},
		"else put after an earlier put":    {ops(then(put("k")), both(nil, ops(put("k")))), true},
		"nested gets only":                 {ops(put("k"), then(get("k"))), false},
	} {
		key, dup := DuplicateWrite(tc.branch)
		require.Equal(t, tc.dup, dup, "%s (key %q)", name, key)
	}
}

func TestNestedShape(t *testing.T) {
	inner := &Txn{If: []Compare{cmpVersion("b")}, Then: ops(put("x")), Else: ops(get("y"), then(del("z")))}
	txn := &Txn{If: []Compare{cmpVersion("a")}, Then: ops(get("a"), Op{Type: OpTxn, Txn: inner}, put("w"))}
	require.True(t, txn.Nests())
	require.Equal(t, 2, txn.Depth())
	require.Equal(t, 1+3+(1+1+2)+1, txn.Size(), "compares and ops at every depth")
	require.False(t, txn.ReadOnly())
	require.True(t, (&Txn{Else: ops(then(then(get("a"))))}).ReadOnly())
	require.False(t, (&Txn{Else: ops(then(then(put("a"))))}).ReadOnly())
	require.True(t, (&Txn{Then: ops(then(Op{Type: OpGet, Key: "p", Prefix: true}))}).PrefixReads())

	var all []string
	for op := range txn.AllOps() {
		all = append(all, op.Key)
	}
	require.Equal(t, []string{"a", "x", "y", "z", "w"}, all)

	// a holds, b does not: the top's Then, the inner's Else, whose
	// nested txn (no compares) runs its Then.
	var asked []string
	ok, flat, plan := txn.Plan(func(c *Compare) bool {
		asked = append(asked, c.Key)
		return c.Key == "a"
	})
	require.True(t, ok)
	require.Equal(t, []string{"a", "b"}, asked, "every compare on the path, before any op")
	require.Equal(t, ops(get("a"), get("y"), del("z"), put("w")), flat)
	res := plan.Nest([]OpResult{{Deleted: 1}, {Deleted: 2}, {Deleted: 3}, {Deleted: 4}})
	require.Equal(t, []OpResult{
		{Deleted: 1},
		{Txn: &TxnResult{Succeeded: false, Ops: []OpResult{
			{Deleted: 2},
			{Txn: &TxnResult{Succeeded: true, Ops: []OpResult{{Deleted: 3}}}},
		}}},
		{Deleted: 4},
	}, res)
	var walked []string
	Ran(txn.Then, res, func(op *Op, r *OpResult) { walked = append(walked, op.Key) })
	require.Equal(t, []string{"a", "y", "z", "w"}, walked)

	flatTxn := &Txn{Then: ops(put("a"))}
	ok, flat, plan = flatTxn.Plan(func(*Compare) bool { return true })
	require.True(t, ok)
	require.Nil(t, plan)
	require.Equal(t, flatTxn.Then, flat)
}
