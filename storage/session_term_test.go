package storage

import (
	"fmt"
	"strings"
	"testing"

	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// TestLeaderSessionDecisionsNeedTheirTerm: an expiry, a credit or a seen
// mark decided by the leader of one term is refused (no change at all)
// when its entry is in another term, as happens when a deposed leader's
// proposal is forwarded to its successor; in its own term it applies. A
// holder's own end of its session carries no term and applies in any.
func TestLeaderSessionDecisionsNeedTheirTerm(t *testing.T) {
	t.Parallel()
	ts := openTestSM(t, nil, Options{})
	ts.term = 5
	a, b := ts.newSession(), ts.newSession()
	ts.put("plain", "x")
	res := ts.txn(command.Txn{Then: []command.Op{{Type: command.OpPut, Key: "eph", Value: []byte("v"), Session: a}}})
	require.Equal(t, command.StatusOK, res.Status)
	rev := ts.StateMachine.Revision()
	// Everything but the applied index, which every entry moves.
	state := func() []string {
		var out []string
		for _, kv := range ts.dump() {
			if !strings.HasPrefix(kv, fmt.Sprintf("%x=", metaAppliedKey)) {
				out = append(out, kv)
			}
		}
		return out
	}
	before := state()

	stale := []*command.Command{
		{Kind: command.KindSessionEnd, Session: &command.Session{ID: a, Expired: true, Term: 4}},
		{Kind: command.KindSessionCredit, Session: &command.Session{Term: 4, Credits: []command.Credit{{ID: a, Nanos: 9}}}},
		{Kind: command.KindSessionSeen, Session: &command.Session{Term: 6, IDs: []int64{a}}},
	}
	for _, c := range stale {
		out := ts.apply(c)
		require.Len(t, out.Results, 1)
		require.Equal(t, command.StatusStaleTerm, out.Results[0].Result.Status, "kind %d", c.Kind)
		require.Empty(t, out.SessionsEnded)
		require.Empty(t, out.Changes)
	}
	require.Equal(t, rev, ts.StateMachine.Revision())
	require.Equal(t, before, state(), "a refused decision changes nothing")
	infos, err := ts.StateMachine.Sessions()
	require.NoError(t, err)
	for _, si := range infos {
		require.Zero(t, si.Unheard, "session %d", si.ID)
	}

	// In its own term it applies; the result names the ended session.
	out := ts.apply(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: a, Expired: true, Term: 5}})
	require.Equal(t, command.StatusOK, out.Results[0].Result.Status)
	require.Equal(t, a, out.Results[0].Result.SessionID)
	require.Equal(t, []int64{a}, out.SessionsEnded)
	_, found := ts.get("eph")
	require.False(t, found, "the expired session's key is gone")

	// Ending it again is a no-op, and says so.
	res = ts.do(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: a, Expired: true, Term: 5}})
	require.Equal(t, command.StatusOK, res.Status)
	require.Zero(t, res.SessionID)

	// The holder's own end has no term: valid whatever the entry's term.
	ts.term = 9
	out = ts.apply(&command.Command{Kind: command.KindSessionEnd, Session: &command.Session{ID: b, Expired: true}})
	require.Equal(t, command.StatusOK, out.Results[0].Result.Status)
	require.Equal(t, []int64{b}, out.SessionsEnded)
}
