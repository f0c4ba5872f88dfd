package storage

import (
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

func nestOp(t command.Txn) command.Op { return command.Op{Type: command.OpTxn, Txn: &t} }

// TestTxnNestedAsEtcd: every compare on the path sees the state before
// the transaction, while the ops see the writes before them, and all of
// them land at one revision (etcd's compareToPath, then executeTxn).
func TestTxnNestedAsEtcd(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1") // rev 1
	res := ts.txn(command.Txn{
		If: []command.Compare{cmpInt64("a", command.TargetVersion, command.Equal, 1)},
		Then: []command.Op{
			// A put of a at this level would break etcd's rule with the
			// delete of a nested below; in an earlier nested transaction
			// it does not (the delete runs after it).
			nestOp(command.Txn{Then: []command.Op{putOp("a", "2")}}),
			nestOp(command.Txn{
				// a is at version 2 by now, but compares see version 1.
				If:   []command.Compare{cmpInt64("a", command.TargetVersion, command.Equal, 1)},
				Then: []command.Op{getOp("a"), putOp("b", "x")},
				Else: []command.Op{putOp("c", "never")},
			}),
			nestOp(command.Txn{
				If:   []command.Compare{cmpInt64("b", command.TargetVersion, command.Greater, 0)},
				Then: []command.Op{putOp("d", "never")},
				Else: []command.Op{getOp("b"), nestOp(command.Txn{Then: []command.Op{delOp("a")}})},
			}),
		},
	})
	require.Equal(t, command.StatusOK, res.Status)
	require.True(t, res.Succeeded)
	require.EqualValues(t, 2, res.Rev, "one revision for every write")
	require.Len(t, res.Ops, 3)
	in := res.Ops[1].Txn
	require.NotNil(t, in)
	require.True(t, in.Succeeded, "compares see the state before the transaction")
	require.Equal(t, "2", string(in.Ops[0].KVs[0].Value), "ops see the writes before them")
	require.Equal(t, "b", in.Ops[1].KVs[0].Key)
	second := res.Ops[2].Txn
	require.False(t, second.Succeeded, "b did not exist before the transaction")
	require.Equal(t, "x", string(second.Ops[0].KVs[0].Value))
	require.EqualValues(t, 1, second.Ops[1].Txn.Ops[0].Deleted)
	require.True(t, second.Ops[1].Txn.Succeeded)
	_, ok := ts.get("a")
	require.False(t, ok, "put then deleted by a later nested transaction, as etcd allows")
	for _, k := range []string{"c", "d"} {
		_, ok := ts.get(k)
		require.False(t, ok, k)
	}
}

// TestTxnNestedDuplicateChangesNothing: a log entry whose nested writes
// break etcd's rule is refused by every member alike.
func TestTxnNestedDuplicateChangesNothing(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("k", "0")
	before := ts.dump()
	for _, branch := range [][]command.Op{
		{putOp("k", "1"), nestOp(command.Txn{Else: []command.Op{putOp("k", "2")}})},
		{delPrefix(""), nestOp(command.Txn{Then: []command.Op{nestOp(command.Txn{Then: []command.Op{putOp("k", "1")}})}})},
		{nestOp(command.Txn{Then: []command.Op{delOp("k")}}), nestOp(command.Txn{Then: []command.Op{putOp("k", "1")}})},
		{nestOp(command.Txn{Then: []command.Op{{Type: command.OpPut, Key: "p", Prefix: true}}})},
	} {
		res := ts.txn(command.Txn{Then: branch})
		require.Equal(t, command.StatusInvalid, res.Status, "%v", branch)
	}
	// Only the meta record (the applied index) moved.
	require.Equal(t, before[1:], ts.dump()[1:])
	require.EqualValues(t, 1, ts.Revision())
}

// TestTxnNestedOnce: a nested transaction's result is kept by the
// proposer table, survives a restart (record format 3) and answers a
// copy, put values filled from the copy.
func TestTxnNestedOnce(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("g", "got")
	c := txnCmd(command.Txn{Then: []command.Op{
		putOp("a", "1"),
		nestOp(command.Txn{Then: []command.Op{getOp("g"), putOp("b", "2"), nestOp(command.Txn{Else: []command.Op{delOp("g")}})}}),
	}})
	c.Proposer = &command.Proposer{ID: 4, Seq: 1, Floor: 1}
	first := ts.do(c)
	require.Equal(t, command.StatusOK, first.Status)
	ts.reopen()
	again := ts.do(c)
	require.True(t, again.Repeat)
	first.Repeat = true
	require.Equal(t, first, again)
	kv, ok := ts.get("a")
	require.True(t, ok)
	require.EqualValues(t, 1, kv.Version, "applied once")
}

func TestReadTxnNested(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	txn := command.Txn{Then: []command.Op{
		getOp("a"),
		nestOp(command.Txn{
			If:   []command.Compare{cmpValue("a", command.Equal, "2")},
			Then: []command.Op{getOp("never")},
			Else: []command.Op{getPrefix(""), nestOp(command.Txn{})},
		}),
	}}
	require.True(t, txn.ReadOnly())
	res, err := ts.ReadTxn(&txn, 0)
	require.NoError(t, err)
	require.True(t, res.Succeeded)
	require.Equal(t, "1", string(res.Ops[0].KVs[0].Value))
	in := res.Ops[1].Txn
	require.False(t, in.Succeeded)
	require.Len(t, in.Ops, 2)
	require.Equal(t, []string{"a=1"}, keysOf(in.Ops[0].KVs))
	require.Equal(t, &command.TxnResult{Succeeded: true}, in.Ops[1].Txn)
	// Applied through the log, it answers the same.
	applied := ts.txn(txn)
	applied.Status = res.Status
	require.Equal(t, res, applied)
}

// TestTxnNestedActor: the actor rule holds for a nested transaction's
// ops as for the top's.
func TestTxnNestedActor(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	res := ts.do(&command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9, Owner: "client:a"}})
	ts.txn(command.Txn{Then: []command.Op{ephemeralPut("e", "v", res.SessionID)}})
	c := txnCmd(command.Txn{Actor: "client:b", Then: []command.Op{
		nestOp(command.Txn{Then: []command.Op{delOp("e")}}),
	}})
	require.Equal(t, command.StatusForbidden, ts.do(c).Status)
	_, ok := ts.get("e")
	require.True(t, ok)
}

func TestResultRecordNested(t *testing.T) {
	t.Parallel()
	res := &command.Result{Rev: 9, Succeeded: true, Ops: []command.OpResult{
		{KVs: []command.KV{{Key: "put", Version: 1, CreateRev: 9, ModRev: 9}}},
		{Txn: &command.TxnResult{Succeeded: false, Ops: []command.OpResult{
			{Deleted: 3},
			{Txn: &command.TxnResult{Succeeded: true}},
			{KVs: []command.KV{{Key: "got", Value: []byte("v"), Version: 2, CreateRev: 1, ModRev: 4}}},
		}}},
	}}
	b := appendResultRecord(nil, res, 5, resultMeta{floor: 2, last: 7})
	require.Equal(t, resultFormat3, b[0])
	got, m, err := decodeResultRecord(b, 5)
	require.NoError(t, err)
	require.Equal(t, res, got)
	require.Equal(t, resultMeta{floor: 2, last: 7}, m)
	flat := &command.Result{Rev: 1, Ops: []command.OpResult{{Deleted: 1}}}
	require.Equal(t, resultFormat2, appendResultRecord(nil, flat, 1, resultMeta{})[0], "a flat result stays in format 2")

	// Format 3 without a nested result, a nested result in format 2, or
	// one nested deeper than transactions nest: refused.
	f3 := appendResultRecord(nil, flat, 1, resultMeta{})
	f3[0] = resultFormat3
	f2 := appendResultRecord(nil, res, 5, resultMeta{floor: 2, last: 7})
	f2[0] = resultFormat2
	deep := &command.Result{Ops: []command.OpResult{{}}}
	op := &deep.Ops[0]
	for range command.MaxNesting + 1 {
		op.Txn = &command.TxnResult{Ops: []command.OpResult{{}}}
		op = &op.Txn.Ops[0]
	}
	for name, bad := range map[string][]byte{"format 3, flat": f3, "format 2, nested": f2,
		"too deep": appendResultRecord(nil, deep, 1, resultMeta{})} {
		_, _, err := decodeResultRecord(bad, 1)
		require.ErrorIs(t, err, ErrCorrupt, name)
	}
}
