package storage

import (
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// TestTxnActorWritesOnlyItsOwnSessions: a client's transaction (with an
// actor) may not put for another owner's session, nor, unless admin,
// delete or overwrite another owner's ephemeral key (each key under a
// prefix delete included) or a lock-delay marker: StatusForbidden, and
// nothing changes. A member's transaction (no actor) may, as before.
func TestTxnActorWritesOnlyItsOwnSessions(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	session := func(owner string) int64 {
		res := ts.do(&command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9, Owner: owner}})
		require.Equal(t, command.StatusOK, res.Status)
		return res.SessionID
	}
	alice, bob, member := session("client:alice"), session("client:bob"), session("")
	const bobLock = "locks/jobs/m00000000000000020000000000000001"
	const marker = "locks/old/d00000000000000090000000000000001"
	for _, op := range []command.Op{ephemeralPut(bobLock, "", bob), ephemeralPut("app/bob", "b", bob),
		ephemeralPut("app/member", "m", member), putOp("app/plain", "p"), putOp(marker, "lock-delay:1000")} {
		require.Equal(t, command.StatusOK, ts.txn(command.Txn{Then: []command.Op{op}}).Status)
	}
	del := func(key string) command.Op { return command.Op{Type: command.OpDelete, Key: key} }
	delPrefix := func(key string) command.Op { return command.Op{Type: command.OpDelete, Key: key, Prefix: true} }

	as := func(actor string, admin bool, ops ...command.Op) command.Status {
		return ts.txn(command.Txn{Then: ops, Actor: actor, Admin: admin}).Status
	}
	rev := ts.Revision()
	for name, ops := range map[string][]command.Op{
		"delete bob's lock":                {del(bobLock)},
		"overwrite it":                     {putOp(bobLock, "mine")},
		"overwrite it for her session":     {ephemeralPut(bobLock, "", alice)},
		"put for bob's session":            {ephemeralPut("app/new", "x", bob)},
		"put for a member's session":       {ephemeralPut("app/new", "x", member)},
		"delete a member's ephemeral key":  {del("app/member")},
		"delete the lock's queue":          {delPrefix("locks/jobs/")},
		"delete everything":                {delPrefix("")},
		"delete a lock-delay marker":       {del(marker)},
		"delete the markers' lock":         {delPrefix("locks/old/")},
		"write a lock-delay marker":        {putOp("locks/new/d00000000000000010000000000000001", "lock-delay:1000")},
		"its own write, then bob's delete": {putOp("app/alice", "a"), del("app/bob")},
	} {
		require.Equal(t, command.StatusForbidden, as("client:alice", false, ops...), name)
	}
	require.Equal(t, command.StatusForbidden, as("client:alice", true, ephemeralPut("app/new", "x", bob)),
		"an admin's ephemeral puts are still its own")
	require.Equal(t, rev, ts.Revision(), "a forbidden transaction changes nothing")
	kv, ok, err := ts.Get(bobLock)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, bob, kv.Session)

	// What alice may do: her own keys, plain keys, and reads of anything.
	require.Equal(t, command.StatusOK, as("client:alice", false,
		ephemeralPut("app/alice", "a", alice), putOp("app/plain", "q"), del("app/plain"),
		command.Op{Type: command.OpGet, Key: bobLock}, command.Op{Type: command.OpGet, Key: "", Prefix: true}))
	require.Equal(t, command.StatusOK, as("client:alice", false, delPrefix("app/alice")))
	// A compare that fails picks the other branch, which alone is checked.
	res := ts.txn(command.Txn{If: []command.Compare{{Key: "none", Target: command.TargetVersion, Op: command.Equal, Int: 1}},
		Then: []command.Op{del(bobLock)}, Else: []command.Op{putOp("app/x", "x")}, Actor: "client:alice"})
	require.Equal(t, command.StatusOK, res.Status)
	require.False(t, res.Succeeded)

	// An admin, and a member, may delete another's keys and markers.
	require.Equal(t, command.StatusOK, as("client:ops", true, del(bobLock), del(marker)))
	require.Equal(t, command.StatusOK, as("", false, delPrefix("app/")))
	_, ok, err = ts.Get("app/member")
	require.NoError(t, err)
	require.False(t, ok)
}
