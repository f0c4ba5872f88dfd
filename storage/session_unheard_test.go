package storage

import (
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

func TestSessionUnheardCreditAndSeen(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	a, b := ts.newSession(), ts.newSession()
	rev := ts.StateMachine.Revision()
	unheard := func() map[int64]int64 {
		infos, err := ts.StateMachine.Sessions()
		require.NoError(t, err)
		m := map[int64]int64{}
		for _, s := range infos {
			m[s.ID] = s.Unheard
		}
		return m
	}
	require.Equal(t, map[int64]int64{a: 0, b: 0}, unheard())

	credit := &command.Command{Kind: command.KindSessionCredit, Session: &command.Session{
		Credits: []command.Credit{{ID: a, Nanos: 5}, {ID: b, Nanos: 7}, {ID: 999, Nanos: 1}}}}
	require.Equal(t, command.StatusOK, ts.do(credit).Status)
	require.Equal(t, command.StatusOK, ts.do(credit).Status)
	require.Equal(t, map[int64]int64{a: 10, b: 14}, unheard(), "credits add up; unknown sessions are skipped")

	seen := &command.Command{Kind: command.KindSessionSeen, Session: &command.Session{IDs: []int64{a}}}
	require.Equal(t, command.StatusOK, ts.do(seen).Status)
	require.Equal(t, map[int64]int64{a: 0, b: 14}, unheard())
	require.Equal(t, rev, ts.StateMachine.Revision(), "bookkeeping of sessions is not a change to the keyspace")

	ts.reopen()
	require.Equal(t, map[int64]int64{a: 0, b: 14}, unheard(), "unheard time is durable")

	out := ts.apply(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: b}})
	require.Equal(t, []int64{b}, out.SessionsEnded)
	out = ts.apply(&command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 42}})
	require.Len(t, out.SessionsCreated, 1)
	require.EqualValues(t, 42, out.SessionsCreated[0].TTL)
}
