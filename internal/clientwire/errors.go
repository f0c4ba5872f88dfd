package clientwire

import (
	"errors"
	"fmt"
)

// The package's sentinel errors. Every error the package returns wraps
// one of these (or a context error), so callers branch with errors.Is.
var (
	// ErrProtocol: the peer broke the protocol (a malformed frame, an
	// unknown kind, a response to no request). The connection is closed.
	ErrProtocol = errors.New("clientwire: protocol violation")
	// ErrFrameTooLarge: a frame is longer than the receiver's limit. Sent
	// or received, it is never allocated.
	ErrFrameTooLarge = errors.New("clientwire: frame too large")
	// ErrVersion: the two ends share no protocol version, or a frame
	// carries a version other than the one agreed.
	ErrVersion = errors.New("clientwire: unsupported protocol version")
	// ErrRefused: the member refused the connection in its Welcome; the
	// *RefusedError says why.
	ErrRefused = errors.New("clientwire: connection refused by member")
	// ErrTooManyRequests: the member already runs as many requests of this
	// client as its limit allows; the request was not carried out.
	ErrTooManyRequests = errors.New("clientwire: too many requests in flight")
	// ErrTooManyWatchers: the client already has as many watches on this
	// member as its limit allows; the watch was not started.
	ErrTooManyWatchers = errors.New("clientwire: too many watchers")
	// ErrForbidden: the request is not one a client may make (a command
	// kind reserved to members, a session the client does not own).
	ErrForbidden = errors.New("clientwire: request not allowed for a client")
	// ErrConnClosed: the connection is closed (by Close, by the peer, or
	// after a protocol violation); pending calls end with it.
	ErrConnClosed = errors.New("clientwire: connection closed")
	// ErrTooManySessions: the client's identity already holds as many
	// sessions in the cell as the member allows; no session was created.
	ErrTooManySessions = errors.New("clientwire: too many sessions for this client")
	// ErrSlowReader: the member cut the connection because the client
	// did not read what it was sent (its queue passed its byte limit, or
	// a write missed its deadline).
	ErrSlowReader = errors.New("clientwire: client cut off for not reading")
	// ErrIdle: the member closed the connection because the client sent
	// nothing for its idle timeout, or left a frame unfinished past its
	// I/O timeout.
	ErrIdle = errors.New("clientwire: client idle or stalled mid-frame")
)

// Code is the stable number of an error on the wire. The root package
// maps each of its sentinels to one code and back; the numbers never
// change meaning (a new error gets a new number).
type Code uint16

// The codes. 1 to 63 stand for the root package's sentinels, in the order
// of errors.go; 64 and up are this package's own.
const (
	CodeNone            Code = 0 // no error (a watch that ended because it was cancelled)
	CodeNotFound        Code = 1
	CodeConflict        Code = 2
	CodeAmbiguous       Code = 3
	CodeNoQuorum        Code = 4
	CodeTimeout         Code = 5
	CodeClosed          Code = 6
	CodeKeyTooLarge     Code = 7
	CodeValueTooLarge   Code = 8
	CodeTooManyOps      Code = 9
	CodeQuotaExceeded   Code = 10
	CodeCompacted       Code = 11
	CodeInvalidKey      Code = 12
	CodeInvalidConfig   Code = 13
	CodeSessionExpired  Code = 14
	CodeSessionClosed   Code = 15
	CodeInvalidTTL      Code = 16
	CodeLocked          Code = 17
	CodeNotHeld         Code = 18
	CodeNoLeader        Code = 19
	CodeNotLeader       Code = 20
	CodeSlowWatcher     Code = 21
	CodeMemberExists    Code = 22
	CodeUnknownMember   Code = 23
	CodeNotCaughtUp     Code = 24
	CodeStateLost       Code = 25
	CodeDataDir         Code = 26
	CodeListen          Code = 27
	CodeInternal        Code = 28
	CodeStaleToken      Code = 29
	CodeInvalidToken    Code = 30
	CodeMarksFormat     Code = 31
	CodeMarksInUse      Code = 32
	CodeMarkStore       Code = 33
	CodeInvalidArgument Code = 34
	CodeReadTooLarge    Code = 35
	CodeFutureRev       Code = 36

	CodeProtocol        Code = 64 // maps to ErrProtocol
	CodeFrameTooLarge   Code = 65 // maps to ErrFrameTooLarge
	CodeTooManyRequests Code = 66 // maps to ErrTooManyRequests
	CodeTooManyWatchers Code = 67 // maps to ErrTooManyWatchers
	CodeForbidden       Code = 68 // maps to ErrForbidden
	CodeCanceled        Code = 69 // the request's context ended at the member
	CodeUnknown         Code = 70 // an error the member could not classify
	CodeConnLost        Code = 71 // client side only: the connection ended; resume elsewhere
	CodeTooManySessions Code = 72 // maps to ErrTooManySessions
)

// Error is an error answered by the member: a Code and a human message.
// It matches this package's own sentinels with errors.Is (a CodeTooManyRequests
// Error is ErrTooManyRequests); the root package maps the other codes to
// its sentinels.
type Error struct {
	Code    Code
	Message string
}

// Error describes the member's answer.
func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("clientwire: member answered error code %d", e.Code)
	}
	return fmt.Sprintf("clientwire: member answered: %s (code %d)", e.Message, e.Code)
}

// Is reports whether e stands for target, one of this package's sentinels.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeProtocol:
		return target == ErrProtocol
	case CodeFrameTooLarge:
		return target == ErrFrameTooLarge
	case CodeTooManyRequests:
		return target == ErrTooManyRequests
	case CodeTooManyWatchers:
		return target == ErrTooManyWatchers
	case CodeForbidden:
		return target == ErrForbidden
	case CodeTooManySessions:
		return target == ErrTooManySessions
	}
	return false
}

// RefuseReason says why a member refused a connection.
type RefuseReason uint8

// The refusal reasons.
const (
	// RefuseVersion: no protocol version in the client's range.
	RefuseVersion RefuseReason = iota + 1
	// RefuseBusy: the member serves as many clients as it allows.
	RefuseBusy
	// RefuseForbidden: the identity may not connect (or the Hello's name
	// does not match it).
	RefuseForbidden
	// RefuseShutdown: the member is closing.
	RefuseShutdown
	// RefuseNotReady: the member has not joined a cell yet.
	RefuseNotReady
)

// RefusedError is the error of a refused handshake. It is ErrRefused with
// errors.Is, and also ErrVersion when the reason is RefuseVersion.
type RefusedError struct {
	Reason  RefuseReason
	Message string
}

// Error describes the refusal.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("clientwire: connection refused by member (reason %d): %s", e.Reason, e.Message)
}

// Is makes a RefusedError match ErrRefused, and ErrVersion for a version
// refusal.
func (e *RefusedError) Is(target error) bool {
	return target == ErrRefused || (target == ErrVersion && e.Reason == RefuseVersion)
}
