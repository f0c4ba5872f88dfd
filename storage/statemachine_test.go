package storage

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

func TestSessionEphemeralKeys(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("keep", "k") // rev 1, index 1
	sid := ts.newSession()
	require.EqualValues(t, 2, sid, "a session's ID is its entry's index")
	other := ts.newSession()

	res := ts.txn(command.Txn{Then: []command.Op{
		ephemeralPut("locks/a", "1", sid),
		ephemeralPut("locks/b", "2", sid),
		ephemeralPut("locks/o", "3", other),
		ephemeralPut("moved", "4", sid),
	}}) // rev 2
	require.Equal(t, command.StatusOK, res.Status)
	require.Equal(t, sid, res.Ops[0].KVs[0].Session)
	// A put by another owner (here: none) takes the key out of the session.
	ts.txn(command.Txn{Then: []command.Op{putOp("moved", "mine now")}}) // rev 3
	sessions, err := ts.Sessions()
	require.NoError(t, err)
	require.Equal(t, []SessionInfo{{ID: sid, TTL: 5e9}, {ID: other, TTL: 5e9}}, sessions)

	out := ts.apply(&command.Command{ID: 77, Kind: command.KindSessionEnd, Session: &command.Session{ID: sid, Expired: true}})
	require.Equal(t, []Applied{{Index: ts.AppliedIndex(), ID: 77, Result: command.Result{Rev: 4, SessionID: sid}}}, out.Results)
	want := []Revision{{Rev: 4, Events: []Event{
		{Type: EventDelete, KV: command.KV{Key: "locks/a", Version: 1, CreateRev: 2, ModRev: 4, Session: sid},
			Prev: &command.KV{Key: "locks/a", Value: []byte("1"), Version: 1, CreateRev: 2, ModRev: 2, Session: sid}},
		{Type: EventDelete, KV: command.KV{Key: "locks/b", Version: 1, CreateRev: 2, ModRev: 4, Session: sid},
			Prev: &command.KV{Key: "locks/b", Value: []byte("2"), Version: 1, CreateRev: 2, ModRev: 2, Session: sid}},
	}}}
	require.Equal(t, want, out.Changes, "one revision, one record, for all of the session's keys")
	hist, err := ts.History(3, 0)
	require.NoError(t, err)
	require.Equal(t, want, hist)

	kvs, rev, err := ts.List("")
	require.NoError(t, err)
	require.EqualValues(t, 4, rev)
	require.Equal(t, []string{"keep=k", "locks/o=3", "moved=mine now"}, keysOf(kvs))
	sessions, err = ts.Sessions()
	require.NoError(t, err)
	require.Equal(t, []SessionInfo{{ID: other, TTL: 5e9}}, sessions)

	// A session whose keys were all deleted ends without a revision.
	ts.txn(command.Txn{Then: []command.Op{delOp("locks/o")}}) // rev 5
	out = ts.apply(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: other}})
	require.EqualValues(t, 5, out.Results[0].Result.Rev)
	require.Empty(t, out.Changes)
	sessions, err = ts.Sessions()
	require.NoError(t, err)
	require.Empty(t, sessions)
	// No index entries survive their session.
	require.Empty(t, dumpRange(t, ts.image(), prefixSessionKey, prefixSessionKey+1))
}

func TestSessionEndIsIdempotent(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	sid := ts.newSession()
	ts.txn(command.Txn{Then: []command.Op{ephemeralPut("e", "v", sid)}})
	require.EqualValues(t, 2, ts.endSession(sid).Rev)
	before := ts.dump()
	for _, id := range []int64{sid, 12345, 0, -1} {
		res := ts.endSession(id)
		require.Equal(t, command.StatusOK, res.Status)
		require.EqualValues(t, 2, res.Rev)
	}
	require.Equal(t, before[1:], ts.dump()[1:])
}

func TestSessionNoSession(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	sid := ts.newSession()
	ts.endSession(sid)
	before := ts.dump()
	for _, id := range []int64{sid, 999, -5} {
		res := ts.txn(command.Txn{Then: []command.Op{
			putOp("b", "written first"),
			delOp("a"),
			ephemeralPut("c", "x", id),
		}})
		require.Equal(t, command.StatusNoSession, res.Status)
		require.EqualValues(t, 1, res.Rev)
	}
	require.Equal(t, before[1:], ts.dump()[1:], "a failed command changes nothing")
	// A session created earlier in the same batch exists for later entries.
	out := ts.apply(
		&command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 1}},
		txnCmd(command.Txn{Then: []command.Op{ephemeralPut("c", "x", int64(ts.AppliedIndex()+1))}}),
	)
	require.Equal(t, command.StatusOK, out.Results[1].Result.Status)
}

func TestSessionCommandsInvalid(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	for _, c := range []*command.Command{
		{Kind: command.KindSessionCreate},
		{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 0}},
		{Kind: command.KindSessionCreate, Session: &command.Session{TTL: -1}},
		{Kind: command.KindSessionEnd},
	} {
		require.Equal(t, command.StatusInvalid, ts.do(c).Status)
	}
	sessions, err := ts.Sessions()
	require.NoError(t, err)
	require.Empty(t, sessions)
	require.Equal(t, command.StatusOK, ts.do(&command.Command{Kind: command.KindNoop}).Status)
}

func TestQuota(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{QuotaBytes: 100})
	ts.put("k1", string(make([]byte, 38))) // 40 bytes
	ts.put("k2", string(make([]byte, 38))) // 80 bytes
	before := ts.dump()

	res := ts.txn(command.Txn{Then: []command.Op{putOp("k3", string(make([]byte, 19)))}}) // 101
	require.Equal(t, command.StatusQuotaExceeded, res.Status)
	require.EqualValues(t, 2, res.Rev)
	require.Equal(t, before[1:], ts.dump()[1:], "an over-quota write changes nothing")

	// Exactly at the quota is allowed.
	require.Equal(t, command.StatusOK, ts.txn(command.Txn{Then: []command.Op{putOp("k3", string(make([]byte, 18)))}}).Status)
	// A transaction whose deletes make room is judged by its net growth.
	res = ts.txn(command.Txn{Then: []command.Op{
		putOp("big", string(make([]byte, 47))), // +50
		delOp("k1"),                            // -40
		delOp("k2"),                            // -40
	}})
	require.Equal(t, command.StatusOK, res.Status)
	// ...but not when the net growth would pass it.
	res = ts.txn(command.Txn{Then: []command.Op{putOp("k4", string(make([]byte, 50))), delOp("k3")}}) // 70+52-20
	require.Equal(t, command.StatusQuotaExceeded, res.Status)
	res = ts.txn(command.Txn{Then: []command.Op{delPrefix("k"), putOp("k5", string(make([]byte, 48)))}})
	require.Equal(t, command.StatusOK, res.Status)
	require.EqualValues(t, 100, ts.cur.size)

	// With the quota lowered under the keyspace, deletes and shrinking
	// puts still work; growing ones do not.
	ts.opts.QuotaBytes = 10
	ts.reopen()
	require.Equal(t, command.StatusOK, ts.txn(command.Txn{Then: []command.Op{putOp("big", "smaller")}}).Status)
	require.Equal(t, command.StatusQuotaExceeded, ts.txn(command.Txn{Then: []command.Op{putOp("new", "")}}).Status)
	require.Equal(t, command.StatusOK, ts.txn(command.Txn{Then: []command.Op{delOp("k5")}}).Status)
	require.EqualValues(t, len("big")+len("smaller"), ts.cur.size)
}

func TestHistoryRetention(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{HistoryRevisions: 5})
	hist, err := ts.History(0, 0)
	require.NoError(t, err)
	require.Empty(t, hist)
	require.EqualValues(t, 1, ts.OldestRevision())

	for i := 1; i <= 12; i++ {
		ts.put(fmt.Sprintf("k%d", i), "v")
	}
	require.EqualValues(t, 8, ts.OldestRevision())
	for _, from := range []int64{-1, 0, 5, 6} {
		_, err := ts.History(from, 0)
		require.ErrorIs(t, err, ErrCompacted, "from %d", from)
		require.ErrorContains(t, err, "oldest retained revision is 8")
	}
	hist, err = ts.History(7, 0)
	require.NoError(t, err)
	require.Len(t, hist, 5)
	for i, r := range hist {
		require.EqualValues(t, 8+i, r.Rev)
		require.Equal(t, []Event{{Type: EventPut, KV: command.KV{
			Key: fmt.Sprintf("k%d", 8+i), Value: []byte("v"), Version: 1, CreateRev: r.Rev, ModRev: r.Rev,
		}}}, r.Events)
	}
	hist, err = ts.History(9, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{10, 11}, revsOf(hist))
	for _, from := range []int64{12, 13, 1000} {
		hist, err = ts.History(from, 0)
		require.NoError(t, err)
		require.Empty(t, hist)
	}
	// The records below the window stay on disk until a whole chunk of
	// them can go (TestHistoryPruneChunks).
	require.Len(t, dumpRange(t, ts.image(), prefixHistory, prefixHistory+1), 12)

	// Retention is per revision, however the entries were batched.
	var cmds []*command.Command
	for i := range 7 {
		cmds = append(cmds, txnCmd(command.Txn{Then: []command.Op{putOp(fmt.Sprintf("b%d", i), "v")}}))
	}
	out := ts.apply(cmds...)
	require.Equal(t, []int64{13, 14, 15, 16, 17, 18, 19}, revsOf(out.Changes))
	require.EqualValues(t, 15, ts.OldestRevision())
	hist, err = ts.History(14, 0)
	require.NoError(t, err)
	require.Equal(t, []int64{15, 16, 17, 18, 19}, revsOf(hist))
}

func revsOf(rs []Revision) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Rev
	}
	return out
}

func TestStateMachineRestart(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	require.NoError(t, ts.bootstrap(cs, nil))
	sid := ts.newSession()
	ts.txn(command.Txn{Then: []command.Op{putOp("a", "1"), ephemeralPut("e", "2", sid)}})
	ts.put("a", "3")
	cs2 := &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	_, err := ts.Apply([]*pb.Entry{{
		Index: new(ts.AppliedIndex() + 1), Term: new(uint64(2)), Type: new(pb.EntryConfChangeV2),
	}}, cs2)
	require.NoError(t, err)

	before := ts.dump()
	hist, err := ts.History(0, 0)
	require.NoError(t, err)
	sessions, err := ts.Sessions()
	require.NoError(t, err)

	ts.reopen()
	require.Equal(t, before, ts.dump())
	require.EqualValues(t, 4, ts.AppliedIndex())
	require.EqualValues(t, 2, ts.Revision())
	require.EqualValues(t, 1, ts.OldestRevision())
	require.Equal(t, cs2.GetVoters(), ts.ConfState().GetVoters())
	require.Equal(t, cs2.GetLearners(), ts.ConfState().GetLearners())
	require.Equal(t, smMeta{index: 4, term: 2, rev: 2, size: 4, oldest: 1}, ts.cur)
	kv, ok := ts.get("a")
	require.True(t, ok)
	require.Equal(t, command.KV{Key: "a", Value: []byte("3"), Version: 2, CreateRev: 1, ModRev: 2}, kv)
	hist2, err := ts.History(0, 0)
	require.NoError(t, err)
	require.Equal(t, hist, hist2)
	sessions2, err := ts.Sessions()
	require.NoError(t, err)
	require.Equal(t, sessions, sessions2)

	// The state machine carries on where it was, and entries at or below
	// the applied index (here 3, which would not even decode) are not
	// applied twice.
	out, err := ts.Apply(ts.entries(txnCmd(command.Txn{Then: []command.Op{putOp("a", "x")}})), nil)
	require.NoError(t, err)
	require.Len(t, out.Results, 1)
	_, err = ts.Apply([]*pb.Entry{{Index: new(uint64(3)), Term: new(uint64(1)), Data: []byte{command.Version}}}, nil)
	require.NoError(t, err)
	require.EqualValues(t, 3, ts.Revision())
	// A gap is a bug upstream, refused rather than papered over.
	_, err = ts.Apply([]*pb.Entry{{Index: new(ts.AppliedIndex() + 2), Term: new(uint64(2))}}, nil)
	require.Error(t, err)
}

func TestStateMachineBootstrap(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	require.Empty(t, ts.ConfState().GetVoters())
	cs := &pb.ConfState{Voters: []uint64{7, 8}}
	require.NoError(t, ts.bootstrap(cs, nil))
	cs.Voters[0] = 99 // the state machine keeps its own copy
	require.Equal(t, []uint64{7, 8}, ts.ConfState().GetVoters())
	require.EqualValues(t, 0, ts.AppliedIndex())
	ts.reopen()
	require.Equal(t, []uint64{7, 8}, ts.ConfState().GetVoters())
	require.EqualValues(t, 0, ts.AppliedIndex())

	ts.put("a", "b")
	require.Error(t, ts.bootstrap(cs, nil), "bootstrap after applying entries")
}

func TestStateMachineUnknownCommandVersion(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	before := ts.dump()
	ents := ts.entries(txnCmd(command.Txn{Then: []command.Op{putOp("b", "2")}}), nil)
	ents[1].Data = []byte{command.Version + 1, 0x80}
	_, err := ts.Apply(ents, nil)
	require.ErrorIs(t, err, command.ErrVersion)
	// The node halts at the entry it cannot read; nothing of the batch
	// applies, so a newer binary replays all of it.
	require.EqualValues(t, 1, ts.AppliedIndex())
	require.Equal(t, before, ts.dump())
	_, ok := ts.get("b")
	require.False(t, ok)
}

func TestStateMachineMalformedCommand(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ents := ts.entries(nil, nil, nil)
	ents[0].Data = []byte{command.Version}
	ents[1].Data = []byte{command.Version, 0xc1}
	ents[2].Data = nil // an empty entry is not a command
	out, err := ts.Apply(ents, nil)
	require.NoError(t, err)
	require.Equal(t, []Applied{
		{Index: 1, Result: command.Result{Status: command.StatusInvalid}},
		{Index: 2, Result: command.Result{Status: command.StatusInvalid}},
	}, out.Results)
	require.EqualValues(t, 3, ts.AppliedIndex())
}

func TestStateMachineSkipsConfChangesAndEmptyEntries(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	cc := &pb.Entry{Index: new(uint64(2)), Term: new(uint64(1)), Type: new(pb.EntryConfChange), Data: []byte("not a command")}
	ents := []*pb.Entry{{Index: new(uint64(1)), Term: new(uint64(1))}, cc}
	ents = append(ents, ts.entries(nil, nil, txnCmd(command.Txn{}))[2:]...)
	cs := &pb.ConfState{Voters: []uint64{1}}
	out, err := ts.Apply(ents, cs)
	require.NoError(t, err)
	require.Equal(t, []Applied{{Index: 3, Result: command.Result{Succeeded: true, Ops: []command.OpResult{}}}}, out.Results)
	require.EqualValues(t, 3, ts.AppliedIndex())
	require.Equal(t, []uint64{1}, ts.ConfState().GetVoters())
}

func TestStateMachineUnknownRecordFormat(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	// Keys are read from disk once, when the state machine opens (then
	// served from memory), so that is where a bad record is refused.
	require.NoError(t, ts.image().Set(appendKVKey(nil, "bad"), []byte{99, 1, 2}, pebble.Sync))
	_, err := newStateMachine(ts.image(), &ts.opts)
	require.ErrorIs(t, err, ErrFormat)
	require.NoError(t, ts.image().Delete(appendKVKey(nil, "bad"), pebble.Sync))
	require.NoError(t, ts.image().Set(appendKVKey(nil, "short"), []byte{kvFormat1, 0x80}, pebble.Sync))
	_, err = newStateMachine(ts.image(), &ts.opts)
	require.ErrorIs(t, err, ErrCorrupt)

	require.NoError(t, ts.image().Set(appendHistoryKey(nil, 1), []byte{42}, pebble.Sync))
	_, err = ts.History(0, 0)
	require.ErrorIs(t, err, ErrFormat)

	require.NoError(t, ts.image().Set(metaAppliedKey, []byte{7, 0}, pebble.Sync))
	ts.StateMachine.close()
	_, err = newStateMachine(ts.image(), &ts.opts)
	require.ErrorIs(t, err, ErrFormat)
}

func TestStateMachineClosed(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.put("a", "1")
	ts.StateMachine.close()
	ts.StateMachine.close()
	_, _, err := ts.Get("a")
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = ts.List("")
	require.ErrorIs(t, err, ErrClosed)
	_, err = ts.History(0, 0)
	require.ErrorIs(t, err, ErrClosed)
	_, err = ts.Sessions()
	require.ErrorIs(t, err, ErrClosed)
	_, err = ts.Apply(nil, nil)
	require.ErrorIs(t, err, ErrClosed)
	_, err = ts.snapshot()
	require.ErrorIs(t, err, ErrClosed)
	require.EqualValues(t, 1, ts.Revision())
}

// TestStateMachineConcurrentReads checks that reads racing Apply see a
// state from one instant: List's revision is that of the keys it returns.
func TestStateMachineConcurrentReads(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{HistoryRevisions: 50})
	ts.put("counter", "0")
	const writes = 300
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 3)
	reader := func(check func() error) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := check(); err != nil {
				errc <- err
				return
			}
		}
	}
	wg.Add(3)
	go reader(func() error {
		kvs, rev, err := ts.List("")
		if err != nil {
			return err
		}
		// Every write bumps the counter, so its ModRev is the revision.
		if len(kvs) == 0 || kvs[0].Key != "counter" || kvs[0].ModRev != rev {
			return fmt.Errorf("List saw revision %d with %v", rev, kvs)
		}
		return nil
	})
	go reader(func() error {
		rev := ts.Revision()
		kv, ok, err := ts.Get("counter")
		if err != nil || !ok || kv.ModRev < rev {
			return fmt.Errorf("Get after revision %d: %v %v %v", rev, kv, ok, err)
		}
		return nil
	})
	go reader(func() error {
		from := max(ts.Revision()-20, 0)
		hist, err := ts.History(from, 0)
		if errors.Is(err, ErrCompacted) {
			return nil
		}
		for i, r := range hist {
			if r.Rev != from+1+int64(i) {
				return fmt.Errorf("History(%d) has a gap: %v", from, revsOf(hist))
			}
		}
		return err
	})
	for i := range writes {
		ts.apply(txnCmd(command.Txn{Then: []command.Op{
			putOp("counter", fmt.Sprint(i)), putOp(fmt.Sprintf("k%03d", i%7), "v"),
		}}))
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// TestSMCrashKeepsAppliedIndexWithState crashes a store whose applies were
// not synced: whatever survives, the applied index describes exactly the
// state on disk (they are written in one batch), so a restart replays
// precisely the entries that were lost.
func TestSMCrashKeepsAppliedIndexWithState(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	disk := NewMemDisk()
	s, err := Open(Options{Disk: disk})
	require.NoError(t, err)
	next := uint64(1)
	for round := range 30 {
		var ents []*pb.Entry
		for range 1 + rng.IntN(5) {
			data, err := command.Encode(txnCmd(command.Txn{Then: []command.Op{
				putOp("counter", fmt.Sprint(next)), putOp(fmt.Sprint("k", next), "v"),
			}}))
			require.NoError(t, err)
			ents = append(ents, &pb.Entry{Index: new(next), Term: new(uint64(1)), Data: data})
			next++
		}
		_, err := s.StateMachine().Apply(ents, nil)
		require.NoError(t, err)
		if round%10 == 9 {
			require.NoError(t, s.Sync())
		}
		if rng.IntN(4) != 0 {
			continue
		}
		crashed := disk.Crash(rng)
		require.NoError(t, s.Close())
		disk = crashed
		s, err = Open(Options{Disk: disk})
		require.NoError(t, err)
		sm := s.StateMachine()
		applied := sm.AppliedIndex()
		require.EqualValues(t, applied, sm.Revision(), "one revision per entry")
		if applied > 0 {
			kv, ok, err := sm.Get("counter")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, fmt.Sprint(applied), string(kv.Value))
		}
		kvs, _, err := sm.List("k")
		require.NoError(t, err)
		require.Len(t, kvs, int(applied))
		// Replay from the recovered point, as Raft would.
		next = applied + 1
	}
	require.NoError(t, s.Close())
}
