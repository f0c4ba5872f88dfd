package clientwire

import (
	"errors"
	"fmt"
	"testing"

	"github.com/coordcell/coord/fence"
	"github.com/coordcell/coord/internal/errs"
)

// TestClientErrorCodesBothWays walks every numbered code: its sentinel
// maps back to it, wrapped or not, and the client's error is that
// sentinel with errors.Is. The numbers are clientwire's constants, so a
// table out of step with them fails here.
func TestClientErrorCodesBothWays(t *testing.T) {
	want := map[Code]error{
		CodeNotFound: errs.NotFound, CodeConflict: errs.Conflict,
		CodeAmbiguous: errs.Ambiguous, CodeNoQuorum: errs.NoQuorum,
		CodeTimeout: errs.Timeout, CodeClosed: errs.Closed,
		CodeKeyTooLarge: errs.KeyTooLarge, CodeValueTooLarge: errs.ValueTooLarge,
		CodeTooManyOps: errs.TooManyOps, CodeQuotaExceeded: errs.QuotaExceeded,
		CodeCompacted: errs.Compacted, CodeInvalidKey: errs.InvalidKey,
		CodeInvalidConfig: errs.InvalidConfig, CodeSessionExpired: errs.SessionExpired,
		CodeSessionClosed: errs.SessionClosed, CodeInvalidTTL: errs.InvalidTTL,
		CodeLocked: errs.Locked, CodeNotHeld: errs.NotHeld,
		CodeNoLeader: errs.NoLeader, CodeNotLeader: errs.NotLeader,
		CodeSlowWatcher: errs.SlowWatcher, CodeMemberExists: errs.MemberExists,
		CodeUnknownMember: errs.UnknownMember, CodeNotCaughtUp: errs.NotCaughtUp,
		CodeStateLost: errs.StateLost, CodeDataDir: errs.DataDir,
		CodeListen: errs.Listen, CodeInternal: errs.Internal,
		CodeStaleToken: fence.ErrStaleToken, CodeInvalidToken: fence.ErrInvalidToken,
		CodeMarksFormat: fence.ErrMarksFormat, CodeMarksInUse: fence.ErrMarksInUse,
		CodeMarkStore: fence.ErrMarkStore, CodeInvalidArgument: errs.InvalidArgument,
		CodeReadTooLarge: errs.ReadTooLarge, CodeFutureRev: errs.FutureRev,
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
		if got := CodeOf(s); got != c {
			t.Errorf("CodeOf(%v) = %d, want %d", s, got, c)
		}
		if got := CodeOf(fmt.Errorf("context: %w", s)); got != c {
			t.Errorf("CodeOf(wrapped %v) = %d, want %d", s, got, c)
		}
		if err := ErrorOf(c, "detail"); !errors.Is(err, s) {
			t.Errorf("ErrorOf(%d) = %v, not %v", c, err, s)
		}
		if err := ErrorOf(c, ""); err != s {
			t.Errorf("ErrorOf(%d, \"\") = %v, want the bare sentinel", c, err)
		}
	}
}

func TestClientErrorCodesOwn(t *testing.T) {
	cases := []struct {
		code       Code
		root, wire error
	}{
		{CodeForbidden, errs.Forbidden, ErrForbidden},
		{CodeTooManyRequests, errs.Overloaded, ErrTooManyRequests},
		{CodeTooManyWatchers, errs.Overloaded, ErrTooManyWatchers},
		{CodeTooManySessions, errs.TooManySessions, ErrTooManySessions},
		{CodeConnLost, errs.Ambiguous, ErrConnClosed},
		{CodeFrameTooLarge, errs.InvalidArgument, ErrFrameTooLarge},
	}
	for _, tc := range cases {
		err := ErrorOf(tc.code, "m")
		if !errors.Is(err, tc.root) || !errors.Is(err, tc.wire) {
			t.Errorf("ErrorOf(%d) = %v: want both %v and %v", tc.code, err, tc.root, tc.wire)
		}
	}
	if got := CodeOf(errs.Forbidden); got != CodeForbidden {
		t.Errorf("CodeOf(errs.Forbidden) = %d", got)
	}
	if got := CodeOf(fmt.Errorf("%w: 3 of 3", errs.TooManySessions)); got != CodeTooManySessions {
		t.Errorf("CodeOf(ErrTooManySessions) = %d", got)
	}
	if got := CodeOf(ErrorOf(CodeTooManyWatchers, "")); got != CodeTooManyWatchers {
		t.Errorf("too many watchers round trip = %d", got)
	}
	if got := CodeOf(errors.New("odd")); got != CodeUnknown {
		t.Errorf("unclassified error = %d, want CodeUnknown", got)
	}
	if err := ErrorOf(200, "x"); !errors.Is(err, errs.Internal) {
		t.Errorf("unknown code = %v, want ErrInternal", err)
	}
	busy := RefusalError(&RefusedError{Reason: RefuseBusy})
	if !errors.Is(busy, errs.Overloaded) || !errors.Is(busy, ErrRefused) {
		t.Errorf("busy refusal = %v", busy)
	}
	if err := RefusalError(&RefusedError{Reason: RefuseForbidden}); !errors.Is(err, errs.Forbidden) {
		t.Errorf("forbidden refusal = %v", err)
	}
}
