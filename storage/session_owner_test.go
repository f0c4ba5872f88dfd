package storage

import (
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// TestSessionOwnerIsStored: a client's session keeps its owner through
// updates of its unheard time, a reopen from disk, and Sessions; a
// member's own session is written in format 1, as before owners existed.
func TestSessionOwnerIsStored(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	res := ts.do(&command.Command{Kind: command.KindSessionCreate,
		Session: &command.Session{TTL: 5e9, Owner: "client:w1"}})
	require.Equal(t, command.StatusOK, res.Status)
	owned := res.SessionID
	plain := ts.newSession()
	ts.apply(&command.Command{Kind: command.KindSessionCredit,
		Session: &command.Session{Credits: []command.Credit{{ID: owned, Nanos: 7}}}})

	check := func() {
		t.Helper()
		si, ok, err := ts.StateMachine.Session(owned)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "client:w1", si.Owner)
		require.EqualValues(t, 7, si.Unheard, "the credit kept the owner and the owner the credit")
		si, ok, err = ts.StateMachine.Session(plain)
		require.NoError(t, err)
		require.True(t, ok)
		require.Empty(t, si.Owner)
		_, ok, err = ts.StateMachine.Session(owned + plain + 100)
		require.NoError(t, err)
		require.False(t, ok)
		infos, err := ts.StateMachine.Sessions()
		require.NoError(t, err)
		require.Len(t, infos, 2)
		require.Equal(t, "client:w1", infos[0].Owner)
	}
	check()
	ts.reopen()
	check()

	v, closer, err := ts.image().Get(appendSessionKey(nil, plain))
	require.NoError(t, err)
	require.Equal(t, sessionFormat1, v[0], "a member's session keeps format 1")
	closer.Close()
	v, closer, err = ts.image().Get(appendSessionKey(nil, owned))
	require.NoError(t, err)
	require.Equal(t, sessionFormat2, v[0])
	closer.Close()
}

func TestSessionRecordFormats(t *testing.T) {
	t.Parallel()
	// Format 1, as every build before owners wrote it.
	var it sessionItem
	require.NoError(t, decodeSessionRecord([]byte{sessionFormat1, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0x05}, &it))
	require.Equal(t, sessionItem{ttl: 1e9, unheard: 5}, it)
	in := sessionItem{ttl: 3, unheard: 4, owner: "client:x"}
	b := appendSessionRecord(nil, in)
	var out sessionItem
	require.NoError(t, decodeSessionRecord(b, &out))
	require.Equal(t, in, out)
	in.owner = ""
	require.Equal(t, []byte{sessionFormat1, 3, 4}, appendSessionRecord(nil, in))
	for name, bad := range map[string][]byte{
		"format 2, empty owner": {sessionFormat2, 3, 4, 0},
		"owner beyond the end":  {sessionFormat2, 3, 4, 9, 'c'},
		"trailing byte":         append(appendSessionRecord(nil, sessionItem{ttl: 1, owner: "c"}), 0),
		"empty":                 {},
	} {
		require.ErrorIs(t, decodeSessionRecord(bad, &out), ErrCorrupt, name)
	}
	require.ErrorIs(t, decodeSessionRecord([]byte{4, 1, 1}, &out), ErrFormat, "an unknown format is refused")
}
