package clientwire

// The mapping between the cell's sentinel errors (internal/errs, fence)
// and the protocol's codes: the one table a member answers its clients
// with (CodeOf) and a client reads its member's answers by (ErrorOf).

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordcell/coord/fence"
	"github.com/coordcell/coord/internal/errs"
)

// codeTable maps every sentinel to its code: index i holds the sentinel
// of code i+1, in the order of the root's errors.go, which is the order
// the codes are numbered. A test walks it both ways; a new sentinel gets
// the next number at the end, never a reused one.
var codeTable = [...]error{
	errs.NotFound,         // 1
	errs.Conflict,         // 2
	errs.Ambiguous,        // 3
	errs.NoQuorum,         // 4
	errs.Timeout,          // 5
	errs.Closed,           // 6
	errs.KeyTooLarge,      // 7
	errs.ValueTooLarge,    // 8
	errs.TooManyOps,       // 9
	errs.QuotaExceeded,    // 10
	errs.Compacted,        // 11
	errs.InvalidKey,       // 12
	errs.InvalidConfig,    // 13
	errs.SessionExpired,   // 14
	errs.SessionClosed,    // 15
	errs.InvalidTTL,       // 16
	errs.Locked,           // 17
	errs.NotHeld,          // 18
	errs.NoLeader,         // 19
	errs.NotLeader,        // 20
	errs.SlowWatcher,      // 21
	errs.MemberExists,     // 22
	errs.UnknownMember,    // 23
	errs.NotCaughtUp,      // 24
	errs.StateLost,        // 25
	errs.DataDir,          // 26
	errs.Listen,           // 27
	errs.Internal,         // 28
	fence.ErrStaleToken,   // 29
	fence.ErrInvalidToken, // 30
	fence.ErrMarksFormat,  // 31
	fence.ErrMarksInUse,   // 32
	fence.ErrMarkStore,    // 33
	errs.InvalidArgument,  // 34
	errs.ReadTooLarge,     // 35
	errs.FutureRev,        // 36
}

// sentinelOfCode is the sentinel a code stands for, or nil.
func sentinelOfCode(c Code) error {
	if c >= 1 && int(c) <= len(codeTable) {
		return codeTable[c-1]
	}
	return nil
}

// CodeOf is the code of err, as a member answers it to a client. The
// first sentinel of the table err matches wins, so an error wrapping two
// (ErrClosed with the ErrInternal that stopped the member) keeps the one
// it leads with. Client-only conditions map to the protocol's own codes;
// anything unclassified is CodeUnknown.
func CodeOf(err error) Code {
	if err == nil {
		return CodeNone
	}
	var we *Error
	if errors.As(err, &we) {
		return we.Code
	}
	for i, s := range codeTable {
		if errors.Is(err, s) {
			return Code(i + 1)
		}
	}
	switch {
	case errors.Is(err, errs.Forbidden), errors.Is(err, ErrForbidden):
		return CodeForbidden
	case errors.Is(err, ErrTooManyWatchers):
		return CodeTooManyWatchers
	case errors.Is(err, errs.TooManySessions), errors.Is(err, ErrTooManySessions):
		return CodeTooManySessions
	case errors.Is(err, errs.Overloaded), errors.Is(err, ErrTooManyRequests):
		return CodeTooManyRequests
	case errors.Is(err, ErrFrameTooLarge):
		return CodeFrameTooLarge
	case errors.Is(err, ErrProtocol):
		return CodeProtocol
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return CodeCanceled
	}
	return CodeUnknown
}

// ErrorOf is the error a client returns for a member's answer of code c
// with message msg: it wraps the sentinel of c (errors.Is works as on a
// member), or for the protocol's own codes the sentinel that fits and
// the protocol's too. CodeConnLost, which the client's connection
// reports itself, is ErrAmbiguous: a write in flight when the connection
// ended may or may not have been applied, exactly as on a member whose
// leader changed. (A read can simply be retried; the caller knows which
// it sent.)
func ErrorOf(c Code, msg string) error {
	if s := sentinelOfCode(c); s != nil {
		if msg == "" || msg == s.Error() {
			return s
		}
		return fmt.Errorf("%w: %s", s, msg)
	}
	wrap := func(root, wire error) error {
		if msg == "" {
			return fmt.Errorf("%w (%w)", root, wire)
		}
		return fmt.Errorf("%w (%w): %s", root, wire, msg)
	}
	switch c {
	case CodeNone:
		return nil
	case CodeForbidden:
		return wrap(errs.Forbidden, ErrForbidden)
	case CodeTooManyRequests:
		return wrap(errs.Overloaded, ErrTooManyRequests)
	case CodeTooManyWatchers:
		return wrap(errs.Overloaded, ErrTooManyWatchers)
	case CodeTooManySessions:
		return wrap(errs.TooManySessions, ErrTooManySessions)
	case CodeFrameTooLarge:
		return wrap(errs.InvalidArgument, ErrFrameTooLarge)
	case CodeProtocol:
		return wrap(errs.Internal, ErrProtocol)
	case CodeCanceled:
		// The member gave up because the request's context ended there:
		// for a write, its outcome is unknown.
		return wrap(errs.Ambiguous, context.Canceled)
	case CodeConnLost:
		return wrap(errs.Ambiguous, ErrConnClosed)
	}
	if msg == "" {
		msg = "no message"
	}
	return fmt.Errorf("%w: member answered unknown error code %d: %s", errs.Internal, c, msg)
}

// RefusalError maps a refused handshake to the cell's errors: a busy
// member is ErrOverloaded (try another), a forbidden identity
// ErrForbidden, a closing member ErrClosed. The *RefusedError
// stays in the chain for its reason.
func RefusalError(err error) error {
	var r *RefusedError
	if !errors.As(err, &r) {
		return err
	}
	switch r.Reason {
	case RefuseBusy:
		return fmt.Errorf("%w: %w", errs.Overloaded, err)
	case RefuseForbidden:
		return fmt.Errorf("%w: %w", errs.Forbidden, err)
	case RefuseShutdown:
		return fmt.Errorf("%w: %w", errs.Closed, err)
	case RefuseNotReady:
		return fmt.Errorf("%w: %w", errs.NoQuorum, err)
	}
	return err
}

// MemberClosing reports whether err is a member's answer that it is
// closing. To a client that is not itself closed this is a lost member,
// not the end: the request was not handed to the cell (a command in
// flight is answered ErrAmbiguous instead) and the next member may take
// it.
func MemberClosing(err error) bool {
	var we *Error
	return errors.As(err, &we) && we.Code == CodeClosed
}

// Passing reports whether a member's code says something of the member
// at this moment (it is closing, out of contact with the cell, without a
// leader, catching up, overloaded, or it ended the request itself), not
// of the request: a stream such as a watch, which changes nothing, is
// resumed on this member or the next rather than ended.
func Passing(c Code) bool {
	switch c {
	case CodeClosed, CodeConnLost, CodeSlowWatcher, CodeCanceled, CodeAmbiguous, CodeNoQuorum, CodeTimeout,
		CodeNoLeader, CodeNotLeader, CodeNotCaughtUp, CodeTooManyRequests:
		return true
	}
	return false
}
