package storage

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// renderMem renders every item of s, for comparison.
func renderMem(s memState) []string {
	var out []string
	s.keys.Ascend(func(it kvItem) bool {
		kv := it.kv
		if it.key != kv.Key {
			out = append(out, fmt.Sprintf("item key %q holds %q", it.key, kv.Key))
		}
		out = append(out, fmt.Sprintf("kv %q=%x v%d c%d m%d s%d",
			kv.Key, kv.Value, kv.Version, kv.CreateRev, kv.ModRev, kv.Session))
		return true
	})
	s.sessions.Ascend(func(it sessionItem) bool {
		out = append(out, fmt.Sprintf("session %d ttl %d unheard %d", it.id, it.ttl, it.unheard))
		return true
	})
	s.owned.Ascend(func(it ownedItem) bool {
		out = append(out, fmt.Sprintf("owned %d %q", it.session, it.key))
		return true
	})
	return out
}

// requireMemMatchesDisk checks that the published view is what a full
// read of the records in Pebble gives, at the revision Pebble has.
func requireMemMatchesDisk(t *testing.T, ts *testSM) {
	t.Helper()
	disk, err := loadMemState(ts.image())
	require.NoError(t, err)
	v := ts.view.Load()
	require.Equal(t, renderMem(disk), renderMem(v.memState))
	m, _, err := readMeta(ts.image())
	require.NoError(t, err)
	require.Equal(t, m.rev, v.rev)
	require.Equal(t, m.rev, ts.Revision())
}

// churn applies a bit of everything that changes keys, sessions and
// ownership.
func churn(t *testing.T, ts *testSM) {
	t.Helper()
	s1, s2 := ts.newSession(), ts.newSession()
	for i := range 20 {
		ts.txn(command.Txn{Then: []command.Op{
			ephemeralPut(fmt.Sprintf("locks/x/%03d", i), "", s1),
			getPrefix("locks/x/"),
		}})
		if i%3 == 0 {
			ts.txn(command.Txn{Then: []command.Op{delOp(fmt.Sprintf("locks/x/%03d", i))}})
		}
	}
	ts.txn(command.Txn{Then: []command.Op{
		ephemeralPut("locks/x/005", "taken over", s2), // moves ownership
		putOp("plain", "v"),
		putOp("empty", ""),
		delPrefix("locks/x/01"),
	}})
	ts.do(&command.Command{Kind: command.KindSessionCredit, Session: &command.Session{Credits: []command.Credit{{ID: s2, Nanos: 7}}}})
	ts.endSession(s1)
}

func TestMemStateMatchesDisk(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{HistoryRevisions: 30})
	require.NoError(t, ts.bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	requireMemMatchesDisk(t, ts)
	fillSM(t, ts, 40)
	churn(t, ts)
	requireMemMatchesDisk(t, ts)
	require.NotEmpty(t, ts.view.Load().owned.Len(), "the test covers ownership")

	ts.reopen()
	requireMemMatchesDisk(t, ts)

	// A snapshot replaces everything the receiver held in memory.
	snap, err := ts.snapshot()
	require.NoError(t, err)
	rcv := openTestSM(t, nil, Options{HistoryRevisions: 30})
	fillSM(t, rcv, 7)
	churn(t, rcv)
	rcv.put("only/on/receiver", "x")
	transfer(t, ts, rcv, snap)
	install(t, rcv, snap)
	requireMemMatchesDisk(t, rcv)
	require.Equal(t, renderMem(ts.view.Load().memState), renderMem(rcv.view.Load().memState))
	_, ok := rcv.get("only/on/receiver")
	require.False(t, ok)

	// Both go on alike, and the receiver's state survives a restart.
	churn(t, ts)
	churn(t, rcv)
	requireMemMatchesDisk(t, rcv)
	require.Equal(t, renderMem(ts.view.Load().memState), renderMem(rcv.view.Load().memState))
	rcv.reopen()
	requireMemMatchesDisk(t, rcv)
}

// TestSnapshotWithBadRecordRefused: the live state is decoded while a
// snapshot installs, so a record this node cannot read stops the install
// instead of reaching the disk.
func TestSnapshotWithBadRecordRefused(t *testing.T) {
	t.Parallel()
	src := openTestSM(t, nil, Options{})
	src.put("a", "1")
	src.put("bad", "2")
	// A record of a later format, as a newer member might send.
	require.NoError(t, src.image().Set(appendKVKey(nil, "bad"), []byte{kvFormat1 + 1, 0}, nil))
	snap, err := src.snapshot()
	require.NoError(t, err)
	rcv := openTestSM(t, nil, Options{})
	rcv.put("mine", "x")
	before := rcv.dump()
	transfer(t, src, rcv, snap)
	_, err = rcv.prepareInstall(snap)
	require.ErrorIs(t, err, ErrFormat)
	require.Equal(t, before, rcv.dump())
	kv, ok := rcv.get("mine")
	require.True(t, ok)
	require.Equal(t, "x", string(kv.Value))
}

// readState is what a reader sees of the state machine.
type readState struct {
	kvs      []command.KV
	rev      int64
	index    uint64
	sessions []SessionInfo
}

func readAll(t *testing.T, ts *testSM) readState {
	t.Helper()
	kvs, rev, err := ts.List("")
	require.NoError(t, err)
	sessions, err := ts.Sessions()
	require.NoError(t, err)
	return readState{kvs: kvs, rev: rev, index: ts.AppliedIndex(), sessions: sessions}
}

func TestFailedApplyChangesNothingInMemory(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	sid := ts.newSession()
	ts.txn(command.Txn{Then: []command.Op{putOp("a", "1"), ephemeralPut("e", "1", sid)}})
	before := readAll(t, ts)
	disk := ts.dump()

	// Every batch does some of everything before the entry that fails.
	valid := func() []*command.Command {
		return []*command.Command{
			txnCmd(command.Txn{Then: []command.Op{putOp("a", "2"), putOp("new", "n"), delOp("e")}}),
			{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 1}},
			{Kind: command.KindSessionCredit, Session: &command.Session{Credits: []command.Credit{{ID: sid, Nanos: 5}}}},
			{Kind: command.KindSessionEnd, Session: &command.Session{ID: sid}},
		}
	}
	for name, spoil := range map[string]func(ents []*pb.Entry) []*pb.Entry{
		"gap in the indexes": func(ents []*pb.Entry) []*pb.Entry {
			*ents[len(ents)-1].Index += 5
			return ents
		},
		"unknown command version": func(ents []*pb.Entry) []*pb.Entry {
			return append(ents, &pb.Entry{
				Index: new(*ents[len(ents)-1].Index + 1), Term: new(ts.term),
				Data: []byte{command.Version + 1, 0x80},
			})
		},
	} {
		_, err := ts.Apply(spoil(ts.entries(valid()...)), nil)
		require.Error(t, err, name)
		require.Equal(t, before, readAll(t, ts), name)
		require.Equal(t, disk, ts.dump(), name)
		requireMemMatchesDisk(t, ts)
	}

	// The same entries, unspoiled, apply as if nothing had been tried.
	out := ts.apply(valid()...)
	require.Len(t, out.Results, 4)
	kv, ok := ts.get("a")
	require.True(t, ok)
	require.EqualValues(t, 2, kv.Version)
	_, ok = ts.get("e")
	require.False(t, ok)
	requireMemMatchesDisk(t, ts)
}

func TestReadsReturnCopies(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	res := ts.txn(command.Txn{Then: []command.Op{putOp("k", "value")}})
	res.Ops[0].KVs[0].Value[0] = 'X' // the writer's result is its own
	kv, _ := ts.get("k")
	kv.Value[0] = 'Y'
	kvs, _, err := ts.List("k")
	require.NoError(t, err)
	kvs[0].Value[0] = 'Z'
	res = ts.txn(command.Txn{Then: []command.Op{getOp("k"), getPrefix("k")}})
	res.Ops[0].KVs[0].Value[0] = 'W'
	res.Ops[1].KVs[0].Value[0] = 'V'
	out := ts.apply(txnCmd(command.Txn{Then: []command.Op{putOp("k", "next")}}))
	out.Changes[0].Events[0].Prev.Value[0] = 'U'
	ts.txn(command.Txn{Then: []command.Op{putOp("k", "value")}})

	kv, ok := ts.get("k")
	require.True(t, ok)
	require.Equal(t, "value", string(kv.Value))
	kvs, _, err = ts.List("")
	require.NoError(t, err)
	require.Equal(t, []string{"k=value"}, keysOf(kvs))
	requireMemMatchesDisk(t, ts)
}

// TestReadersSeeWholeRevisions moves units between two keys, one move per
// revision, while readers list concurrently: every list must be exactly
// the state of the revision it reports, never a half-applied one.
func TestReadersSeeWholeRevisions(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	const total = 1000
	// rev 1. After it, revision r has moved r-1 units from a to b, and
	// holds the single queue key q/<r>.
	ts.txn(command.Txn{Then: []command.Op{
		putOp("acct/a", strconv.Itoa(total)), putOp("acct/b", "0"), putOp("acct/q/000001", ""),
	}})
	move := func(r int) *command.Command { // makes revision r
		moved := r - 1
		return txnCmd(command.Txn{Then: []command.Op{
			putOp("acct/a", strconv.Itoa(total-moved)),
			putOp("acct/b", strconv.Itoa(moved)),
			delOp(fmt.Sprintf("acct/q/%06d", r-1)),
			putOp(fmt.Sprintf("acct/q/%06d", r), ""),
			getPrefix("acct/"),
		}})
	}

	var (
		stop  atomic.Bool
		wg    sync.WaitGroup
		reads atomic.Int64
	)
	check := func(kvs []command.KV, rev int64) error {
		moved := int(rev - 1)
		want := []string{
			"acct/a=" + strconv.Itoa(total-moved),
			"acct/b=" + strconv.Itoa(moved),
			fmt.Sprintf("acct/q/%06d=", rev),
		}
		if got := keysOf(kvs); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("revision %d: got %v, want %v", rev, got, want)
		}
		for _, kv := range kvs {
			if kv.ModRev != rev {
				return fmt.Errorf("revision %d: %s has ModRev %d", rev, kv.Key, kv.ModRev)
			}
		}
		return nil
	}
	errs := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for !stop.Load() {
				kvs, rev, err := ts.List("acct/")
				if err == nil {
					err = check(kvs, rev)
				}
				if err == nil && rev < last {
					err = fmt.Errorf("revision went back from %d to %d", last, rev)
				}
				if err != nil {
					errs <- err
					return
				}
				last = rev
				reads.Add(1)
			}
		}()
	}

	r := 2
	for range 300 {
		// Batches of one to four moves, as Raft hands them over.
		var cmds []*command.Command
		for range 1 + r%4 {
			cmds = append(cmds, move(r))
			r++
		}
		out := ts.apply(cmds...)
		// Each transaction's own prefix read saw its own writes.
		last := out.Results[len(out.Results)-1].Result
		require.NoError(t, check(last.Ops[4].KVs, last.Rev))
	}
	// On a busy machine the readers may not have run yet.
	for reads.Load() == 0 {
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, reads.Load())
	kvs, rev, err := ts.List("acct/")
	require.NoError(t, err)
	require.EqualValues(t, r-1, rev)
	require.NoError(t, check(kvs, rev))
}
