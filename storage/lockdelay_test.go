package storage

import (
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/lockq"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

// lockKey is a queue entry of kind under locks/{name}/ for session id.
func lockKey(name string, kind byte, id int64, seq int) string {
	return lockq.EntryKey(lockq.LockPrefix(name), true, kind, id, uint64(seq))
}

func expire(id int64) *command.Command {
	return &command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: id, Expired: true, LockDelay: true}}
}

func TestLockDelayMarkerOnExpiry(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	holder, waiter := ts.newSession(), ts.newSession()
	delay := string(lockq.DelayValue(5 * time.Second))
	hk, wk := lockKey("a", 'm', holder, 1), lockKey("a", 'm', waiter, 1)
	ts.txn(command.Txn{Then: []command.Op{ephemeralPut(hk, delay, holder)}})
	ts.txn(command.Txn{Then: []command.Op{ephemeralPut(wk, delay, waiter)}})
	for _, id := range []int64{holder, waiter} {
		delayed, err := ts.SessionLockDelayed(id)
		require.NoError(t, err)
		require.True(t, delayed)
	}

	out := ts.apply(expire(holder))
	marker := lockKey("a", 'd', holder, 1)
	kv, ok := ts.get(marker)
	require.True(t, ok, "the expired holder left a marker")
	require.Equal(t, delay, string(kv.Value))
	require.Zero(t, kv.Session)
	require.Equal(t, ts.Revision(), kv.CreateRev)
	_, ok = ts.get(hk)
	require.False(t, ok)
	require.Len(t, out.Changes, 1, "one revision: the delete and the marker")
	require.Len(t, out.Changes[0].Events, 2)
	require.Equal(t, EventDelete, out.Changes[0].Events[0].Type)
	require.Equal(t, EventPut, out.Changes[0].Events[1].Type)
	require.Equal(t, marker, out.Changes[0].Events[1].KV.Key)

	delays, err := ts.LockDelays()
	require.NoError(t, err)
	require.Equal(t, []LockDelay{{Key: marker, CreateRev: kv.CreateRev, Delay: 5 * time.Second}}, delays)

	// The waiter's expiry while the marker stands writes none: it never held.
	ts.apply(expire(waiter))
	delays, err = ts.LockDelays()
	require.NoError(t, err)
	require.Len(t, delays, 1)

	// The marker survives a restart, and a guarded delete ends it.
	ts.reopen()
	delays, err = ts.LockDelays()
	require.NoError(t, err)
	require.Len(t, delays, 1)
	res := ts.txn(command.Txn{If: []command.Compare{cmpInt64(marker, command.TargetCreateRev, command.Equal, kv.CreateRev)},
		Then: []command.Op{delOp(marker)}})
	require.True(t, res.Succeeded)
	delays, err = ts.LockDelays()
	require.NoError(t, err)
	require.Empty(t, delays)
}

func TestLockDelayNoMarker(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	delay := string(lockq.DelayValue(time.Second))
	cases := map[string]func(id int64) *command.Command{
		// A Close is the holder letting go: no delay.
		"close": func(id int64) *command.Command {
			return &command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: id}}
		},
		// An expiry without the flag is what a build before lock-delay
		// wrote, and applies as it did.
		"unflagged expiry": func(id int64) *command.Command {
			return &command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: id, Expired: true}}
		},
		"expiry": expire,
	}
	for name, end := range cases {
		t.Run(name, func(t *testing.T) {
			first, second := ts.newSession(), ts.newSession()
			lock := "nm-" + name
			ts.txn(command.Txn{Then: []command.Op{ephemeralPut(lockKey(lock, 'm', first, 1), delay, first)}})
			// second waits behind first, asking for a delay; a key without
			// a delay and a key of another shape are ignored.
			ts.txn(command.Txn{Then: []command.Op{
				ephemeralPut(lockKey(lock, 'm', second, 1), delay, second),
				ephemeralPut(lockKey(lock, 'm', second, 2), "", second),
				ephemeralPut("locks/"+lock+"/other", delay, second),
			}})
			ts.apply(end(second))
			delays, err := ts.LockDelays()
			require.NoError(t, err)
			require.Empty(t, delays, "second never held")
			ts.apply(end(first))
			delays, err = ts.LockDelays()
			require.NoError(t, err)
			if name != "expiry" {
				require.Empty(t, delays)
				return
			}
			require.Len(t, delays, 1)
			ts.txn(command.Txn{Then: []command.Op{delOp(delays[0].Key)}})
		})
	}
}

// A follower that installs a snapshot taken while a marker stood has it,
// and indexes it.
func TestLockDelaySnapshot(t *testing.T) {
	t.Parallel()
	a := openTestSM(t, nil, Options{})
	require.NoError(t, a.bootstrap(&pb.ConfState{Voters: []uint64{1}}, nil))
	id := a.newSession()
	a.txn(command.Txn{Then: []command.Op{ephemeralPut(lockKey("s", 'm', id, 1), string(lockq.DelayValue(time.Second)), id)}})
	a.apply(expire(id))
	snap, err := a.snapshot()
	require.NoError(t, err)
	b := openTestSM(t, nil, Options{})
	transfer(t, a, b, snap)
	install(t, b, snap)
	want, err := a.LockDelays()
	require.NoError(t, err)
	got, err := b.LockDelays()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, want, got)
}

func TestSessionLockDelayed(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	id := ts.newSession()
	ts.txn(command.Txn{Then: []command.Op{
		ephemeralPut("plain", string(lockq.DelayValue(time.Second)), id), // not a lock key
		ephemeralPut(lockKey("x", 'm', id, 1), "", id),
	}})
	delayed, err := ts.SessionLockDelayed(id)
	require.NoError(t, err)
	require.False(t, delayed)
	ts.txn(command.Txn{Then: []command.Op{ephemeralPut(lockKey("y", 'm', id, 2), string(lockq.DelayValue(time.Second)), id)}})
	delayed, err = ts.SessionLockDelayed(id)
	require.NoError(t, err)
	require.True(t, delayed)
	delayed, err = ts.SessionLockDelayed(id + 1)
	require.NoError(t, err)
	require.False(t, delayed)
}
