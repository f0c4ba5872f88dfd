package storage

import (
	"fmt"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// onceCmd is a put of key=value by proposer id's command seq.
func onceCmd(id, seq, floor uint64, key, value string) *command.Command {
	c := txnCmd(command.Txn{Then: []command.Op{putOp(key, value)}})
	c.Proposer = &command.Proposer{ID: id, Seq: seq, Floor: floor}
	return c
}

func resolveCmd(id, seq uint64) *command.Command {
	return &command.Command{Kind: command.KindResolve, Proposer: &command.Proposer{ID: id, Seq: seq}}
}

func TestProposerCopiesApplyOnce(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	first := ts.do(onceCmd(7, 1, 1, "k", "v"))
	require.Equal(t, command.StatusOK, first.Status)
	require.False(t, first.Repeat)
	// Other writes in between, then the copy (a re-sent forward).
	ts.put("other", "x")
	out := ts.apply(onceCmd(7, 1, 1, "k", "v"), onceCmd(7, 1, 1, "k", "v"))
	for _, r := range out.Results {
		require.True(t, r.Result.Repeat)
		require.Equal(t, first.Rev, r.Result.Rev)
		require.Equal(t, first.Ops[0].KVs[0], r.Result.Ops[0].KVs[0], "the first copy's result, put value included")
	}
	require.Empty(t, out.Changes, "a copy writes nothing")
	kv, ok := ts.get("k")
	require.True(t, ok)
	require.EqualValues(t, 1, kv.Version)

	// Another proposer's command of the same numbers is its own.
	r := ts.do(onceCmd(8, 1, 1, "k", "w"))
	require.False(t, r.Repeat)
	kv, _ = ts.get("k")
	require.EqualValues(t, 2, kv.Version)

	// The same ID under another owner (a client) is another proposer.
	c := onceCmd(7, 1, 1, "k", "u")
	c.Proposer.Owner = "client:mallory"
	r = ts.do(c)
	require.False(t, r.Repeat)
}

func TestProposerSessionCreateOnce(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	c := &command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9},
		Proposer: &command.Proposer{ID: 3, Seq: 1, Floor: 1}}
	a := ts.do(c)
	b := ts.do(c)
	require.Equal(t, a.SessionID, b.SessionID)
	require.True(t, b.Repeat)
	sessions, err := ts.Sessions()
	require.NoError(t, err)
	require.Len(t, sessions, 1)
}

func TestProposerFloorForgetsAndRefuses(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	for seq := uint64(1); seq <= 5; seq++ {
		ts.do(onceCmd(1, seq, 1, "k", "v"))
	}
	require.Equal(t, 5, ts.ProposerStats().Results)
	// The proposer says it needs nothing below 5.
	ts.do(onceCmd(1, 6, 5, "k", "v"))
	st := ts.ProposerStats()
	require.Equal(t, 2, st.Results)
	before, _ := ts.get("k")
	// A late copy of 3 is refused, not applied again.
	r := ts.do(onceCmd(1, 3, 1, "k", "v"))
	require.Equal(t, command.StatusRetired, r.Status)
	after, _ := ts.get("k")
	require.Equal(t, before, after)
	// A copy of 5 still gets its result.
	require.True(t, ts.do(onceCmd(1, 5, 1, "k", "v")).Repeat)
}

func TestProposerResultsPerProposerBounded(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{MaxResultsPerProposer: 4})
	for seq := uint64(1); seq <= 10; seq++ {
		ts.do(onceCmd(1, seq, 1, "k", "v"))
	}
	require.Equal(t, 4, ts.ProposerStats().Results)
	require.Equal(t, command.StatusRetired, ts.do(onceCmd(1, 2, 1, "k", "v")).Status)
	require.True(t, ts.do(onceCmd(1, 9, 1, "k", "v")).Repeat)
}

func TestProposerResolve(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	applied := ts.do(onceCmd(1, 1, 1, "a", "1"))

	// Resolving an applied command gives its result.
	r := ts.do(resolveCmd(1, 1))
	require.Equal(t, command.StatusOK, r.Status)
	require.Equal(t, applied.Rev, r.Rev)
	require.True(t, r.Repeat)

	// Resolving one that never arrived settles it as never applied...
	r = ts.do(resolveCmd(1, 2))
	require.Equal(t, command.StatusNotApplied, r.Status)
	// ...so its copy, arriving late, changes nothing.
	late := ts.do(onceCmd(1, 2, 1, "b", "2"))
	require.Equal(t, command.StatusNotApplied, late.Status)
	_, ok := ts.get("b")
	require.False(t, ok)
	// Resolving again says the same.
	require.Equal(t, command.StatusNotApplied, ts.do(resolveCmd(1, 2)).Status)
}

func TestProposerIdempotencyKey(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	c := func(v string) *command.Command {
		cmd := txnCmd(command.Txn{Then: []command.Op{putOp("job", v)}})
		cmd.Proposer = &command.Proposer{Owner: "client:x", Key: "job-17"}
		return cmd
	}
	first := ts.do(c("run-1"))
	// Resubmitted after a restart, by another proposer ID: the same key.
	again := ts.do(c("run-1"))
	require.True(t, again.Repeat)
	require.Equal(t, first.Rev, again.Rev)
	kv, _ := ts.get("job")
	require.EqualValues(t, 1, kv.Version)
}

func TestProposerRetiredByIdleEntries(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{ProposerRetainEntries: 10})
	ts.do(onceCmd(1, 1, 1, "k", "v"))
	born := ts.AppliedIndex()
	for ts.AppliedIndex() < 2*retireEvery {
		ts.apply(nil, nil, nil, nil, nil, nil, nil, nil)
	}
	st := ts.ProposerStats()
	require.Zero(t, st.Proposers)
	require.Zero(t, st.Results)
	require.GreaterOrEqual(t, st.Horizon, born)

	// A copy of its command, from a call that began before the horizon,
	// is refused: its record (and result) are gone.
	old := onceCmd(1, 1, 1, "k", "v")
	old.Proposer.Born = born - 1
	require.Equal(t, command.StatusRetired, ts.do(old).Status)
	kv, _ := ts.get("k")
	require.EqualValues(t, 1, kv.Version)

	// A new proposer, whose calls begin after the horizon, applies.
	fresh := onceCmd(2, 1, 1, "k", "w")
	fresh.Proposer.Born = ts.AppliedIndex()
	require.Equal(t, command.StatusOK, ts.do(fresh).Status)
}

func TestProposerRetiredPerOwner(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{MaxProposersPerOwner: 3})
	for id := uint64(1); id <= 6; id++ {
		c := onceCmd(id, 1, 1, "k", "v")
		c.Proposer.Owner = "client:flood"
		ts.do(c)
	}
	honest := onceCmd(99, 1, 1, "h", "v")
	honest.Proposer.Owner = "client:honest"
	ts.do(honest)
	for ts.AppliedIndex() < retireEvery {
		ts.apply(nil)
	}
	require.Equal(t, 4, ts.ProposerStats().Proposers, "the flooding owner keeps its 3 newest; the other owner is untouched")
	require.True(t, ts.do(honest).Repeat)
}

func TestProposerTableSurvivesRestartAndSnapshot(t *testing.T) {
	t.Parallel()
	a := openTestSM(t, nil, Options{})
	a.do(onceCmd(1, 1, 1, "k", "v"))
	a.do(resolveCmd(1, 2))
	k := txnCmd(command.Txn{Then: []command.Op{getOp("k")}})
	k.Proposer = &command.Proposer{Owner: "client:x", Key: "read-once"}
	a.do(k)
	want := a.ProposerStats()
	a.reopen()
	require.Equal(t, want, a.ProposerStats())
	require.True(t, a.do(onceCmd(1, 1, 1, "k", "v")).Repeat)
	require.Equal(t, command.StatusNotApplied, a.do(onceCmd(1, 2, 1, "k", "v")).Status)

	snap, err := a.snapshot()
	require.NoError(t, err)
	b := openTestSM(t, nil, Options{})
	transfer(t, a, b, snap)
	install(t, b, snap)
	require.Equal(t, a.ProposerStats(), b.ProposerStats())
	r := b.do(k)
	require.True(t, r.Repeat)
	require.Equal(t, "v", string(r.Ops[0].KVs[0].Value), "a read's result is kept")
}

func TestProposerLargeReadsTrimmed(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{MaxResultBytes: 64})
	ts.put("big", string(make([]byte, 200)))
	c := txnCmd(command.Txn{Then: []command.Op{getOp("big"), putOp("w", "x")}})
	c.Proposer = &command.Proposer{ID: 1, Seq: 1, Floor: 1}
	first := ts.do(c)
	require.Len(t, first.Ops[0].KVs, 1)
	again := ts.do(c)
	require.True(t, again.Repeat)
	require.True(t, again.Trimmed)
	require.Empty(t, again.Ops[0].KVs)
	require.Equal(t, "x", string(again.Ops[1].KVs[0].Value))
}

func TestResultRecordRoundTrip(t *testing.T) {
	t.Parallel()
	res := &command.Result{Status: command.StatusOK, Rev: 9, Succeeded: true, SessionID: -3,
		Ops: []command.OpResult{{Deleted: 2}, {KVs: []command.KV{{Key: "a", Value: []byte{}, Version: 1, CreateRev: 2, ModRev: 3, Session: 4}, {Key: "b"}}},
			{KVs: []command.KV{{Key: "put", Version: 3, CreateRev: 2, ModRev: 9, Session: 5}}}, // a put's, as kept
			{KVs: []command.KV{{Key: "new", Version: 1, CreateRev: 9, ModRev: 9}}},
			{KVs: []command.KV{{Key: "got", Value: []byte("v"), Version: 1, CreateRev: 9, ModRev: 9}}}}}
	for _, c := range []struct {
		seq uint64
		m   resultMeta
	}{{1, resultMeta{}}, {12, resultMeta{floor: 7, last: 1 << 40}}, {3, resultMeta{floor: 9, last: 3, explicit: true}},
		{math.MaxUint64, resultMeta{last: 5}}, {0, resultMeta{floor: math.MaxUint64, last: 5}}} {
		got, gotMeta, err := decodeResultRecord(appendResultRecord(nil, res, c.seq, c.m), c.seq)
		require.NoError(t, err)
		require.Equal(t, res, got)
		require.Equal(t, c.m, gotMeta)
	}
	// The first format's records, which earlier builds wrote, read as
	// explicit results; their length is the size every build counts.
	v1 := appendResultRecord1(nil, res)
	got, m, err := decodeResultRecord(v1, 12)
	require.NoError(t, err)
	require.Equal(t, res, got)
	require.Equal(t, resultMeta{explicit: true}, m)
	require.EqualValues(t, len(v1), resultSize(res))
	// A put's result, the common one, takes fewer bytes than it did.
	put := &command.Result{Rev: 123_456, Succeeded: true, Ops: []command.OpResult{{KVs: []command.KV{
		{Key: "bench/key/000123", Version: 17, CreateRev: 100_000, ModRev: 123_456}}}}}
	v2 := appendResultRecord(nil, put, 70_000, resultMeta{floor: 69_937, last: 140_000})
	require.Less(t, len(v2), len(appendResultRecord1(nil, put)))
	for _, bad := range [][]byte{nil, {3}, {resultFormat1}, {resultFormat1, 0, 4, 0, 0, 0}, {resultFormat1, 0, 0, 0, 0, 0xff, 0x7f},
		{resultFormat2, 0, 8, 0, 0, 0, 0, 0}, {resultFormat2, 0, 0, 0, 0, 0, 0}, {resultFormat2, 0, 0, 0, 0, 0, 0, 1, 2}} {
		_, _, err := decodeResultRecord(bad, 1)
		require.Error(t, err, "%x", bad)
	}
}

// appendResultRecord1 is how builds of resultFormat1 wrote a result.
func appendResultRecord1(dst []byte, res *command.Result) []byte {
	var flags byte
	if res.Succeeded {
		flags |= resultSucceeded
	}
	if res.Trimmed {
		flags |= resultTrimmed
	}
	return appendResultBody(append(dst, resultFormat1, byte(res.Status), flags), res)
}

// A proposer's record at the highest sequence number goes with it when
// it retires: a restart then finds what the others hold.
func TestProposerRetiredWithTheLastSequence(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{ProposerRetainEntries: 10})
	r := ts.do(resolveCmd(5, math.MaxUint64)) // a client may ask after any number
	require.Equal(t, command.StatusNotApplied, r.Status)
	ts.do(onceCmd(6, math.MaxUint64, math.MaxUint64, "k", "v"))
	for ts.AppliedIndex() < retireEvery {
		ts.apply(nil)
	}
	require.Equal(t, ProposerStats{Horizon: 2}, ts.ProposerStats())
	ts.reopen()
	require.Equal(t, ProposerStats{Horizon: 2}, ts.ProposerStats())
}

// resultRecords counts the stored result records of proposer id (owner "").
func resultRecords(ts *testSM, id uint64) int {
	ts.t.Helper()
	lo := appendResultsKey(nil, proposerRef{id: id})
	n := 0
	it, err := ts.image().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	require.NoError(ts.t, err)
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	require.NoError(ts.t, it.Error())
	return n
}

// Forgotten results are not deleted one by one, but their records do not
// pile up: a range goes each time the floor passes a chunk.
func TestProposerForgottenRecordsPruned(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	const inFlight = 10
	for seq := uint64(1); seq <= 1000; seq++ {
		ts.do(onceCmd(1, seq, max(seq, inFlight)-inFlight+1, "k", "v"))
		require.LessOrEqual(t, resultRecords(ts, 1), inFlight+floorChunk, "at %d", seq)
	}
	st := ts.ProposerStats()
	require.Equal(t, inFlight, st.Results)
	ts.reopen()
	require.Equal(t, st, ts.ProposerStats())
	require.Equal(t, command.StatusRetired, ts.do(onceCmd(1, 990, 1, "k", "v")).Status)
	require.True(t, ts.do(onceCmd(1, 991, 1, "k", "v")).Repeat)
}

// A result kept below its proposer's floor (a command whose floor passed
// its own sequence) outlives the ranges of forgotten records, and a
// restart, until the floor moves again.
func TestProposerResultBelowFloorKept(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	for seq := uint64(1); seq <= 5; seq++ {
		ts.do(onceCmd(1, seq, seq, "k", "v"))
	}
	below := ts.do(onceCmd(1, 6, 3*floorChunk, "k", "below"))
	require.Equal(t, command.StatusOK, below.Status)
	require.Equal(t, 1, resultRecords(ts, 1), "the records below went in a range")
	ts.reopen()
	r := ts.do(onceCmd(1, 6, 1, "k", "below"))
	require.True(t, r.Repeat)
	require.Equal(t, below.Rev, r.Rev)
	require.Equal(t, command.StatusRetired, ts.do(onceCmd(1, 5, 1, "k", "v")).Status)
	ts.do(onceCmd(1, 3*floorChunk, 3*floorChunk+1, "k", "v"))
	require.Equal(t, command.StatusRetired, ts.do(onceCmd(1, 6, 1, "k", "below")).Status, "forgotten when the floor moved")
	require.Equal(t, 1, ts.ProposerStats().Results)
	ts.reopen()
	require.Equal(t, command.StatusRetired, ts.do(onceCmd(1, 6, 1, "k", "below")).Status)
	require.Equal(t, 1, ts.ProposerStats().Results)
}

// A result that goes as soon as it is kept (the oldest past
// MaxResultsPerProposer) still moves the floor for good, across a
// restart, even when the floor's move deletes the records below it.
func TestProposerTrimmedAtOnceKeepsFloor(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{MaxResultsPerProposer: 2})
	ts.do(onceCmd(1, floorChunk+36, 1, "k", "v"))
	ts.do(onceCmd(1, floorChunk+37, 1, "k", "v"))
	late := uint64(floorChunk - 1)
	require.Equal(t, command.StatusOK, ts.do(onceCmd(1, late, 1, "k", "late")).Status)
	kv, _ := ts.get("k")
	for range 2 {
		require.Equal(t, command.StatusRetired, ts.do(onceCmd(1, late, 1, "k", "late")).Status)
		ts.reopen()
	}
	again, _ := ts.get("k")
	require.Equal(t, kv, again, "applied once")
}

// A published table never changes (readers hold it without locks: a
// member answering callers after a snapshot, Outcome's reads) though the
// next Apply shares its arrays: out of order results, trailing floors,
// trimming, resolves, within and across batches.
func TestProposerPublishedTableUnchanged(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{MaxResultsPerProposer: 8})
	render := func(v *view) []string {
		var out []string
		v.props.proposers.Ascend(func(it proposerItem) bool {
			out = append(out, fmt.Sprintf("%+v floor %d last %d bytes %d", it.proposerRef, it.floor, it.last, it.bytes))
			for _, r := range it.results {
				out = append(out, fmt.Sprintf("  %d %v %+v", r.seq, r.explicit, *r.res))
			}
			return true
		})
		return out
	}
	var views []*view
	var want [][]string
	for seq := uint64(1); seq <= 200; seq += 4 {
		ts.apply(onceCmd(1, seq+3, seq/2+1, "k", "v"), onceCmd(1, seq+1, seq/2+1, "k", "v"),
			onceCmd(1, seq, seq/2+1, "k", "v"), resolveCmd(1, seq+2), onceCmd(2, seq, seq, "k", "w"))
		v := ts.view.Load()
		views, want = append(views, v), append(want, render(v))
	}
	for i, v := range views {
		require.Equal(t, want[i], render(v), "view %d", i)
	}
	require.Equal(t, 9, ts.ProposerStats().Results)
}
