package coord

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/clientwire"
)

// codeTable maps every root sentinel to its clientwire code: index i holds
// the sentinel of code i+1, in the order of errors.go, which is the order
// clientwire numbers them. A test walks it both ways; a new sentinel gets
// the next number at the end, never a reused one.
var codeTable = [...]error{
	ErrNotFound,        // 1
	ErrConflict,        // 2
	ErrAmbiguous,       // 3
	ErrNoQuorum,        // 4
	ErrTimeout,         // 5
	ErrClosed,          // 6
	ErrKeyTooLarge,     // 7
	ErrValueTooLarge,   // 8
	ErrTooManyOps,      // 9
	ErrQuotaExceeded,   // 10
	ErrCompacted,       // 11
	ErrInvalidKey,      // 12
	ErrInvalidConfig,   // 13
	ErrSessionExpired,  // 14
	ErrSessionClosed,   // 15
	ErrInvalidTTL,      // 16
	ErrLocked,          // 17
	ErrNotHeld,         // 18
	ErrNoLeader,        // 19
	ErrNotLeader,       // 20
	ErrSlowWatcher,     // 21
	ErrMemberExists,    // 22
	ErrUnknownMember,   // 23
	ErrNotCaughtUp,     // 24
	ErrStateLost,       // 25
	ErrDataDir,         // 26
	ErrListen,          // 27
	ErrInternal,        // 28
	ErrStaleToken,      // 29
	ErrInvalidToken,    // 30
	ErrMarksFormat,     // 31
	ErrMarksInUse,      // 32
	ErrMarkStore,       // 33
	ErrInvalidArgument, // 34
	ErrReadTooLarge,    // 35
}

// sentinelOfCode is the root sentinel a wire code stands for, or nil.
func sentinelOfCode(c clientwire.Code) error {
	if c >= 1 && int(c) <= len(codeTable) {
		return codeTable[c-1]
	}
	return nil
}

// codeFromErr is the wire code of err, as a member answers it to a
// client. The first sentinel of the table err matches wins, so an error
// wrapping two (ErrClosed with the ErrInternal that stopped the member)
// keeps the one it leads with. Client-only conditions map to clientwire's
// own codes; anything unclassified is CodeUnknown.
func codeFromErr(err error) clientwire.Code {
	if err == nil {
		return clientwire.CodeNone
	}
	var we *clientwire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	for i, s := range codeTable {
		if errors.Is(err, s) {
			return clientwire.Code(i + 1)
		}
	}
	switch {
	case errors.Is(err, ErrForbidden), errors.Is(err, clientwire.ErrForbidden):
		return clientwire.CodeForbidden
	case errors.Is(err, clientwire.ErrTooManyWatchers):
		return clientwire.CodeTooManyWatchers
	case errors.Is(err, ErrTooManySessions), errors.Is(err, clientwire.ErrTooManySessions):
		return clientwire.CodeTooManySessions
	case errors.Is(err, ErrOverloaded), errors.Is(err, clientwire.ErrTooManyRequests):
		return clientwire.CodeTooManyRequests
	case errors.Is(err, clientwire.ErrFrameTooLarge):
		return clientwire.CodeFrameTooLarge
	case errors.Is(err, clientwire.ErrProtocol):
		return clientwire.CodeProtocol
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return clientwire.CodeCanceled
	}
	return clientwire.CodeUnknown
}

// errFromCode is the error a client returns for a member's answer of code
// c with message msg: it wraps the root sentinel of c (errors.Is works as
// on a member), or for clientwire's own codes the root sentinel that
// fits and clientwire's too. CodeConnLost, which the client's connection
// reports itself, is ErrAmbiguous: a write in flight when the connection
// ended may or may not have been applied, exactly as on a member whose
// leader changed. (A read can simply be retried; the caller knows which
// it sent.)
func errFromCode(c clientwire.Code, msg string) error {
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
	case clientwire.CodeNone:
		return nil
	case clientwire.CodeForbidden:
		return wrap(ErrForbidden, clientwire.ErrForbidden)
	case clientwire.CodeTooManyRequests:
		return wrap(ErrOverloaded, clientwire.ErrTooManyRequests)
	case clientwire.CodeTooManyWatchers:
		return wrap(ErrOverloaded, clientwire.ErrTooManyWatchers)
	case clientwire.CodeTooManySessions:
		return wrap(ErrTooManySessions, clientwire.ErrTooManySessions)
	case clientwire.CodeFrameTooLarge:
		return wrap(ErrInvalidArgument, clientwire.ErrFrameTooLarge)
	case clientwire.CodeProtocol:
		return wrap(ErrInternal, clientwire.ErrProtocol)
	case clientwire.CodeCanceled:
		// The member gave up because the request's context ended there:
		// for a write, its outcome is unknown.
		return wrap(ErrAmbiguous, context.Canceled)
	case clientwire.CodeConnLost:
		return wrap(ErrAmbiguous, clientwire.ErrConnClosed)
	}
	if msg == "" {
		msg = "no message"
	}
	return fmt.Errorf("%w: member answered unknown error code %d: %s", ErrInternal, c, msg)
}

// errFromRefusal maps a refused handshake to the root's errors: a busy
// member is ErrOverloaded (try another), a forbidden identity
// ErrForbidden, a closing member ErrClosed. The *clientwire.RefusedError
// stays in the chain for its reason.
func errFromRefusal(err error) error {
	var r *clientwire.RefusedError
	if !errors.As(err, &r) {
		return err
	}
	switch r.Reason {
	case clientwire.RefuseBusy:
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	case clientwire.RefuseForbidden:
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	case clientwire.RefuseShutdown:
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case clientwire.RefuseNotReady:
		return fmt.Errorf("%w: %w", ErrNoQuorum, err)
	}
	return err
}

// memberClosing reports whether err is a member's answer that it is
// closing. To a client that is not itself closed this is a lost member,
// not the end: the request was not handed to the cell (a command in
// flight is answered ErrAmbiguous instead) and the next member may take
// it.
func memberClosing(err error) bool {
	var we *clientwire.Error
	return errors.As(err, &we) && we.Code == clientwire.CodeClosed
}

// waitConnEnd waits until conn ends (a closing member closes every
// client connection), so that the next Client.current returns the next
// member's; it returns ctx's error if ctx ends first.
func waitConnEnd(ctx context.Context, conn *clientwire.ClientConn) error {
	select {
	case <-conn.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
