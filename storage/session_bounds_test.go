package storage

import (
	"fmt"
	"strings"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

func clientCreate(owner string, max int64) *command.Command {
	return &command.Command{Kind: command.KindSessionCreate,
		Session: &command.Session{TTL: 5e9, Owner: owner, Charged: true, MaxSessions: max}}
}

// stateBut is the state range but the applied record, which every entry
// moves: what a refused command must leave as it was.
func stateBut(ts *testSM) []string {
	var out []string
	for _, kv := range ts.dump() {
		if !strings.HasPrefix(kv, fmt.Sprintf("%x=", metaAppliedKey)) {
			out = append(out, kv)
		}
	}
	return out
}

// TestSessionOwnerBoundIsReplicated: a creation carrying MaxSessions is
// refused, with nothing changed, once its owner holds that many sessions
// in the replicated state, whichever member proposes it; other owners,
// and members' own sessions, are not held to it; an end gives the place
// back; the count is rebuilt from the sessions on reopen and from a
// snapshot.
func TestSessionOwnerBoundIsReplicated(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	require.NoError(t, ts.bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	a1 := ts.do(clientCreate("client:a", 2))
	a2 := ts.do(clientCreate("client:a", 2))
	require.Equal(t, command.StatusOK, a1.Status)
	require.Equal(t, command.StatusOK, a2.Status)
	before := stateBut(ts)
	res := ts.do(clientCreate("client:a", 2))
	require.Equal(t, command.StatusTooManySessions, res.Status)
	require.Zero(t, res.SessionID)
	require.Equal(t, before, stateBut(ts), "a refused creation changes nothing")
	require.EqualValues(t, 2, ts.OwnerSessions("client:a"))

	// A member with a higher bound admits one more: each creation is held
	// to the bound it carries, over the whole cell's count.
	require.Equal(t, command.StatusOK, ts.do(clientCreate("client:a", 3)).Status)
	require.Equal(t, command.StatusTooManySessions, ts.do(clientCreate("client:a", 3)).Status)
	require.Equal(t, command.StatusOK, ts.do(clientCreate("client:b", 1)).Status, "another owner")
	for range 3 {
		require.Equal(t, command.StatusOK, ts.do(&command.Command{Kind: command.KindSessionCreate,
			Session: &command.Session{TTL: 5e9, Charged: true, MaxSessions: 1}}).Status, "a member's own session has no owner to bound")
	}
	require.Equal(t, command.StatusInvalid, ts.do(clientCreate("client:c", -1)).Status)

	ts.endSession(a1.SessionID)
	require.EqualValues(t, 2, ts.OwnerSessions("client:a"))
	ts.reopen()
	require.EqualValues(t, 2, ts.OwnerSessions("client:a"), "rebuilt on reopen")
	require.EqualValues(t, 1, ts.OwnerSessions("client:b"))
	require.Equal(t, command.StatusTooManySessions, ts.do(clientCreate("client:a", 2)).Status)

	snap, err := ts.snapshot()
	require.NoError(t, err)
	other := openTestSM(t, nil, Options{})
	transfer(t, ts, other, snap)
	install(t, other, snap)
	require.EqualValues(t, 2, other.OwnerSessions("client:a"), "rebuilt from a snapshot")
	require.Equal(t, ts.SessionBytes(), other.SessionBytes())
	next := clientCreate("client:a", 3)
	out, err := other.Apply(ts.entriesAt(snap.GetMetadata().GetIndex()+1, next), nil)
	require.NoError(t, err)
	require.Equal(t, command.StatusOK, out.Results[0].Result.Status)
	out, err = ts.Apply(ts.entries(next), nil)
	require.NoError(t, err)
	require.Equal(t, command.StatusOK, out.Results[0].Result.Status)
	require.Equal(t, ts.dump(), other.dump(), "both members decided alike")
}

// TestChargedSessionsCountAgainstQuota: a charged session's bytes count
// against QuotaBytes with the keys': a creation or a put that would pass
// it is refused and changes nothing; an end gives the bytes back. A
// creation from an older build's log is not charged, as that build did
// not charge it.
func TestChargedSessionsCountAgainstQuota(t *testing.T) {
	t.Parallel()
	const quota = 512
	ts := openTestSM(t, nil, Options{QuotaBytes: quota})
	cost := sessionCost(5e9, "client:quota")
	var ids []int64
	for {
		res := ts.do(clientCreate("client:quota", 0))
		if res.Status != command.StatusOK {
			require.Equal(t, command.StatusQuotaExceeded, res.Status)
			break
		}
		ids = append(ids, res.SessionID)
		require.Less(t, len(ids), quota, "sessions never reached the quota")
	}
	require.Equal(t, int64(len(ids))*cost, ts.SessionBytes())
	require.Greater(t, ts.SessionBytes()+cost, int64(quota))
	require.Len(t, ids, int(quota/cost))
	before := stateBut(ts)
	res := ts.txn(command.Txn{Then: []command.Op{putOp("k", strings.Repeat("v", int(quota-ts.SessionBytes())))}})
	require.Equal(t, command.StatusQuotaExceeded, res.Status, "sessions' bytes count for puts")
	require.Equal(t, before, stateBut(ts))
	legacy := ts.do(&command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9}})
	require.Equal(t, command.StatusOK, legacy.Status, "an uncharged creation, as older builds made")
	require.Equal(t, int64(len(ids))*cost, ts.SessionBytes())

	ts.endSession(ids[0])
	require.Equal(t, int64(len(ids)-1)*cost, ts.SessionBytes())
	ts.reopen()
	require.Equal(t, int64(len(ids)-1)*cost, ts.SessionBytes(), "rebuilt on reopen")
	require.Equal(t, command.StatusOK, ts.do(clientCreate("client:quota", 0)).Status)
	require.Equal(t, command.StatusQuotaExceeded, ts.do(clientCreate("client:quota", 0)).Status)
}

// TestSilenceMarksAndClock: a leader's KindSessionSilent moves the
// session clock forward (never back) and marks sessions silent; a
// session's unheard time is then the clock's advance since its mark, on
// top of older builds' credits; a later mark does not move an earlier
// one; a seen mark lifts it; all of it is durable, and only a leader (a
// term) may decide it.
func TestSilenceMarksAndClock(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	a, b, c := ts.newSession(), ts.newSession(), ts.newSession()
	rev := ts.Revision()
	silent := func(clock int64, marks ...command.Credit) *command.Command {
		return &command.Command{Kind: command.KindSessionSilent,
			Session: &command.Session{Term: 1, Clock: clock, Credits: marks}}
	}
	unheard := func() map[int64]int64 {
		t.Helper()
		_, infos, err := ts.SessionState()
		require.NoError(t, err)
		m := map[int64]int64{}
		for _, si := range infos {
			m[si.ID] = si.Unheard
		}
		return m
	}
	before := stateBut(ts)
	noTerm := silent(5, command.Credit{ID: a})
	noTerm.Session.Term = 0
	require.Equal(t, command.StatusInvalid, ts.do(noTerm).Status, "only a leader decides silence")
	require.Equal(t, before, stateBut(ts))

	require.Equal(t, command.StatusOK, ts.do(silent(10, command.Credit{ID: a, Nanos: 10}, command.Credit{ID: 999, Nanos: 1})).Status)
	require.Equal(t, map[int64]int64{a: 0, b: 0, c: 0}, unheard(), "marked at the clock: nothing unheard yet")
	ts.apply(&command.Command{Kind: command.KindSessionCredit,
		Session: &command.Session{Credits: []command.Credit{{ID: c, Nanos: 3}}}})
	require.Equal(t, command.StatusOK, ts.do(silent(25, command.Credit{ID: b, Nanos: 20}, command.Credit{ID: c, Nanos: 40})).Status)
	require.Equal(t, map[int64]int64{a: 15, b: 5, c: 3}, unheard(), "a mark past the clock is held to the clock")
	require.Equal(t, command.StatusOK, ts.do(silent(7, command.Credit{ID: a, Nanos: 24})).Status)
	clock, _, err := ts.SessionState()
	require.NoError(t, err)
	require.EqualValues(t, 25, clock, "the clock never moves back")
	require.Equal(t, map[int64]int64{a: 15, b: 5, c: 3}, unheard(), "an earlier mark stands")
	require.Equal(t, rev, ts.Revision(), "sessions' bookkeeping is not a change to the keyspace")

	ts.reopen()
	require.Equal(t, map[int64]int64{a: 15, b: 5, c: 3}, unheard(), "marks and clock are durable")
	require.Equal(t, command.StatusOK, ts.do(&command.Command{Kind: command.KindSessionSeen,
		Session: &command.Session{Term: 1, IDs: []int64{a, c}}}).Status)
	require.Equal(t, command.StatusOK, ts.do(silent(100)).Status, "an entry of the clock alone")
	require.Equal(t, map[int64]int64{a: 0, b: 80, c: 0}, unheard(), "seen: heard from again")
	for _, id := range []int64{a, b, c} {
		si, _, err := ts.Session(id)
		require.NoError(t, err)
		require.Equal(t, id == b, si.Silent, "session %d", id)
	}

	v, closer, err := ts.image().Get(metaClockKey)
	require.NoError(t, err)
	require.Equal(t, []byte{clockFormat1, 100}, v)
	closer.Close()
}

func TestSessionRecordFormat3(t *testing.T) {
	t.Parallel()
	for _, in := range []sessionItem{
		{ttl: 3, unheard: 4, charged: true},
		{ttl: 3, owner: "client:x", charged: true},
		{ttl: 3, unheard: 1, owner: "client:x", marked: true, mark: 1 << 40},
		{ttl: 3, charged: true, marked: true},
	} {
		b := appendSessionRecord(nil, in)
		require.Equal(t, sessionFormat3, b[0])
		var out sessionItem
		require.NoError(t, decodeSessionRecord(b, &out))
		require.Equal(t, in, out)
	}
	require.Equal(t, []byte{sessionFormat3, 3, 4, 0, sessionCharged}, appendSessionRecord(nil, sessionItem{ttl: 3, unheard: 4, charged: true}))
	require.Equal(t, int64(len(appendSessionKey(nil, 1))+len(appendSessionRecord(nil, sessionItem{ttl: 5e9, owner: "client:x", charged: true}))),
		sessionCost(5e9, "client:x"), "a session costs its key and its record as created")
	var out sessionItem
	for name, bad := range map[string][]byte{
		"no flags":      {sessionFormat3, 3, 4, 0, 0},
		"unknown flag":  {sessionFormat3, 3, 4, 0, 4},
		"mark missing":  {sessionFormat3, 3, 4, 0, sessionMarked},
		"flags missing": {sessionFormat3, 3, 4, 0},
		"trailing":      {sessionFormat3, 3, 4, 0, sessionCharged, 0},
		"mark too far":  {sessionFormat3, 3, 4, 0, sessionMarked, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		require.ErrorIs(t, decodeSessionRecord(bad, &out), ErrCorrupt, name)
	}
}
