package coord

import (
	"errors"
	"fmt"
	"testing"

	"github.com/coordcell/coord/internal/clientwire"
)

// TestClientErrorCodesBothWays walks every numbered code: its sentinel
// maps back to it, wrapped or not, and the client's error is that
// sentinel with errors.Is. The numbers are clientwire's constants, so a
// table out of step with them fails here.
func TestClientErrorCodesBothWays(t *testing.T) {
	want := map[clientwire.Code]error{
		clientwire.CodeNotFound: ErrNotFound, clientwire.CodeConflict: ErrConflict,
		clientwire.CodeAmbiguous: ErrAmbiguous, clientwire.CodeNoQuorum: ErrNoQuorum,
		clientwire.CodeTimeout: ErrTimeout, clientwire.CodeClosed: ErrClosed,
		clientwire.CodeKeyTooLarge: ErrKeyTooLarge, clientwire.CodeValueTooLarge: ErrValueTooLarge,
		clientwire.CodeTooManyOps: ErrTooManyOps, clientwire.CodeQuotaExceeded: ErrQuotaExceeded,
		clientwire.CodeCompacted: ErrCompacted, clientwire.CodeInvalidKey: ErrInvalidKey,
		clientwire.CodeInvalidConfig: ErrInvalidConfig, clientwire.CodeSessionExpired: ErrSessionExpired,
		clientwire.CodeSessionClosed: ErrSessionClosed, clientwire.CodeInvalidTTL: ErrInvalidTTL,
		clientwire.CodeLocked: ErrLocked, clientwire.CodeNotHeld: ErrNotHeld,
		clientwire.CodeNoLeader: ErrNoLeader, clientwire.CodeNotLeader: ErrNotLeader,
		clientwire.CodeSlowWatcher: ErrSlowWatcher, clientwire.CodeMemberExists: ErrMemberExists,
		clientwire.CodeUnknownMember: ErrUnknownMember, clientwire.CodeNotCaughtUp: ErrNotCaughtUp,
		clientwire.CodeStateLost: ErrStateLost, clientwire.CodeDataDir: ErrDataDir,
		clientwire.CodeListen: ErrListen, clientwire.CodeInternal: ErrInternal,
		clientwire.CodeStaleToken: ErrStaleToken, clientwire.CodeInvalidToken: ErrInvalidToken,
		clientwire.CodeMarksFormat: ErrMarksFormat, clientwire.CodeMarksInUse: ErrMarksInUse,
		clientwire.CodeMarkStore: ErrMarkStore, clientwire.CodeInvalidArgument: ErrInvalidArgument,
		clientwire.CodeReadTooLarge: ErrReadTooLarge,
	}
	if len(want) != len(codeTable) {
		t.Fatalf("table has %d sentinels, clientwire numbers %d", len(codeTable), len(want))
	}
	seen := map[error]bool{}
	for c, s := range want {
		if seen[s] {
			t.Fatalf("sentinel %v has two codes", s)
		}
		seen[s] = true
		if got := codeFromErr(s); got != c {
			t.Errorf("codeFromErr(%v) = %d, want %d", s, got, c)
		}
		if got := codeFromErr(fmt.Errorf("context: %w", s)); got != c {
			t.Errorf("codeFromErr(wrapped %v) = %d, want %d", s, got, c)
		}
		if err := errFromCode(c, "detail"); !errors.Is(err, s) {
			t.Errorf("errFromCode(%d) = %v, not %v", c, err, s)
		}
		if err := errFromCode(c, ""); err != s {
			t.Errorf("errFromCode(%d, \"\") = %v, want the bare sentinel", c, err)
		}
	}
}

func TestClientErrorCodesOwn(t *testing.T) {
	cases := []struct {
		code       clientwire.Code
		root, wire error
	}{
		{clientwire.CodeForbidden, ErrForbidden, clientwire.ErrForbidden},
		{clientwire.CodeTooManyRequests, ErrOverloaded, clientwire.ErrTooManyRequests},
		{clientwire.CodeTooManyWatchers, ErrOverloaded, clientwire.ErrTooManyWatchers},
		{clientwire.CodeTooManySessions, ErrTooManySessions, clientwire.ErrTooManySessions},
		{clientwire.CodeConnLost, ErrAmbiguous, clientwire.ErrConnClosed},
		{clientwire.CodeFrameTooLarge, ErrInvalidArgument, clientwire.ErrFrameTooLarge},
	}
	for _, tc := range cases {
		err := errFromCode(tc.code, "m")
		if !errors.Is(err, tc.root) || !errors.Is(err, tc.wire) {
			t.Errorf("errFromCode(%d) = %v: want both %v and %v", tc.code, err, tc.root, tc.wire)
		}
	}
	if got := codeFromErr(ErrForbidden); got != clientwire.CodeForbidden {
		t.Errorf("codeFromErr(ErrForbidden) = %d", got)
	}
	if got := codeFromErr(fmt.Errorf("%w: 3 of 3", ErrTooManySessions)); got != clientwire.CodeTooManySessions {
		t.Errorf("codeFromErr(ErrTooManySessions) = %d", got)
	}
	if got := codeFromErr(errFromCode(clientwire.CodeTooManyWatchers, "")); got != clientwire.CodeTooManyWatchers {
		t.Errorf("too many watchers round trip = %d", got)
	}
	if got := codeFromErr(errors.New("odd")); got != clientwire.CodeUnknown {
		t.Errorf("unclassified error = %d, want CodeUnknown", got)
	}
	if err := errFromCode(200, "x"); !errors.Is(err, ErrInternal) {
		t.Errorf("unknown code = %v, want ErrInternal", err)
	}
	busy := errFromRefusal(&clientwire.RefusedError{Reason: clientwire.RefuseBusy})
	if !errors.Is(busy, ErrOverloaded) || !errors.Is(busy, clientwire.ErrRefused) {
		t.Errorf("busy refusal = %v", busy)
	}
	if err := errFromRefusal(&clientwire.RefusedError{Reason: clientwire.RefuseForbidden}); !errors.Is(err, ErrForbidden) {
		t.Errorf("forbidden refusal = %v", err)
	}
}

// KeepAliveBatches counts the keep-alive messages n sent to the leader,
// for the external tests of client keep-alive folding.
func KeepAliveBatches(n *Node) uint64 { return n.sessions.batches.Load() }
