package storage

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// testSM is a state machine on its own Pebble database, on an in-memory
// file system that survives reopen. It numbers the entries it applies.
type testSM struct {
	*StateMachine
	t    testing.TB
	fs   *vfs.MemFS
	db   *pebble.DB
	opts Options
	term uint64
}

const smTestDir = "/sm"

// openTestSM opens (or creates) a state machine on fs; nil fs = a fresh
// MemFS. It is closed when the test ends.
func openTestSM(t testing.TB, fs *vfs.MemFS, opts Options) *testSM {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	ts := &testSM{t: t, fs: fs, opts: opts, term: 1}
	ts.open()
	t.Cleanup(ts.close)
	return ts
}

func (ts *testSM) open() {
	ts.t.Helper()
	popts := &pebble.Options{
		FS:                 ts.fs,
		Logger:             pebbleLogger{slog.New(slog.DiscardHandler)},
		FormatMajorVersion: pebble.FormatColumnarBlocks, // as Open's
	}
	db, err := pebble.Open(smTestDir, popts)
	require.NoError(ts.t, err)
	opts := ts.opts
	opts.setDefaults()
	sm, err := newStateMachine(db, &opts)
	if err == nil {
		err = sm.setStaging(ts.fs, smTestDir, popts)
	}
	if err != nil {
		db.Close()
		require.NoError(ts.t, err)
	}
	ts.db, ts.StateMachine = db, sm
}

func (ts *testSM) close() {
	if ts.db == nil {
		return
	}
	ts.StateMachine.close()
	require.NoError(ts.t, ts.db.Close())
	ts.db = nil
}

func (ts *testSM) reopen() {
	ts.t.Helper()
	ts.close()
	ts.open()
}

// entries makes the entries that carry cmds, numbered after the applied
// index. A nil command makes an empty entry.
func (ts *testSM) entries(cmds ...*command.Command) []*pb.Entry {
	ts.t.Helper()
	next := ts.AppliedIndex() + 1
	ents := make([]*pb.Entry, len(cmds))
	for i, c := range cmds {
		ents[i] = &pb.Entry{Index: new(next + uint64(i)), Term: new(ts.term)}
		if c != nil {
			data, err := command.Encode(c)
			require.NoError(ts.t, err)
			ents[i].Data = data
		}
	}
	return ents
}

// apply applies cmds in one batch and returns their results.
func (ts *testSM) apply(cmds ...*command.Command) ApplyOutput {
	ts.t.Helper()
	out, err := ts.Apply(ts.entries(cmds...), nil)
	require.NoError(ts.t, err)
	return out
}

// do applies one command alone and returns its result.
func (ts *testSM) do(c *command.Command) command.Result {
	ts.t.Helper()
	out := ts.apply(c)
	require.Len(ts.t, out.Results, 1)
	return out.Results[0].Result
}

func (ts *testSM) txn(t command.Txn) command.Result {
	ts.t.Helper()
	return ts.do(txnCmd(t))
}

// put writes key and requires it to succeed.
func (ts *testSM) put(key, value string) command.KV {
	ts.t.Helper()
	res := ts.txn(command.Txn{Then: []command.Op{putOp(key, value)}})
	require.Equal(ts.t, command.StatusOK, res.Status)
	return res.Ops[0].KVs[0]
}

// newSession creates a session and returns its ID.
func (ts *testSM) newSession() int64 {
	ts.t.Helper()
	res := ts.do(&command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9}})
	require.Equal(ts.t, command.StatusOK, res.Status)
	require.NotZero(ts.t, res.SessionID)
	return res.SessionID
}

func (ts *testSM) endSession(id int64) command.Result {
	ts.t.Helper()
	return ts.do(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: id}})
}

// get reads key through the public Get and requires no error.
func (ts *testSM) get(key string) (command.KV, bool) {
	ts.t.Helper()
	kv, ok, err := ts.Get(key)
	require.NoError(ts.t, err)
	return kv, ok
}

// image returns the database once it holds the applied state: Apply
// leaves its batches to the image writer.
func (ts *testSM) image() *pebble.DB {
	ts.t.Helper()
	require.NoError(ts.t, ts.drainImage())
	return ts.db
}

// dump returns every pair of the state range, rendered for comparison.
func (ts *testSM) dump() []string {
	ts.t.Helper()
	return dumpRange(ts.t, ts.image(), prefixStateFirst, prefixStateEnd)
}

func dumpRange(t testing.TB, db *pebble.DB, lo, hi byte) []string {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{lo}, UpperBound: []byte{hi}})
	require.NoError(t, err)
	defer it.Close()
	var out []string
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%x=%x", it.Key(), v))
	}
	require.NoError(t, it.Error())
	return out
}

func txnCmd(t command.Txn) *command.Command {
	return &command.Command{Kind: command.KindTxn, Txn: &t}
}

func putOp(key, value string) command.Op {
	return command.Op{Type: command.OpPut, Key: key, Value: []byte(value)}
}

func ephemeralPut(key, value string, session int64) command.Op {
	op := putOp(key, value)
	op.Session = session
	return op
}

func getOp(key string) command.Op { return command.Op{Type: command.OpGet, Key: key} }

func getPrefix(prefix string) command.Op {
	return command.Op{Type: command.OpGet, Key: prefix, Prefix: true}
}

func delOp(key string) command.Op { return command.Op{Type: command.OpDelete, Key: key} }

func delPrefix(prefix string) command.Op {
	return command.Op{Type: command.OpDelete, Key: prefix, Prefix: true}
}

func cmpInt64(key string, target command.CompareTarget, op command.CompareOp, v int64) command.Compare {
	return command.Compare{Key: key, Target: target, Op: op, Int: v}
}

func cmpValue(key string, op command.CompareOp, v string) command.Compare {
	return command.Compare{Key: key, Target: command.TargetValue, Op: op, Value: []byte(v)}
}

// keysOf returns the keys of kvs, and values rendered as strings.
func keysOf(kvs []command.KV) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key + "=" + string(kv.Value)
	}
	return out
}

// requireSameKV compares KVs, treating nil and empty values alike.
func requireSameKV(t testing.TB, want, got command.KV, msgAndArgs ...any) {
	t.Helper()
	require.True(t, bytes.Equal(want.Value, got.Value), "value: want %q, got %q", want.Value, got.Value)
	want.Value, got.Value = nil, nil
	require.Equal(t, want, got, msgAndArgs...)
}

// testSegmentBytes is the Raft log's segment size in tests on a real
// disk: a default 32 MiB segment is filled, synced and (in the refusal
// tests) hashed whole, which under the race detector costs seconds.
const testSegmentBytes = 256 << 10
