package cell

import (
	"context"
	"errors"
)

// ErrorClass names why an operation failed, in terms both sides share, so
// a scenario can count each side's failures by kind.
type ErrorClass string

// The error classes.
const (
	// ClassAmbiguous: the call ended with its outcome unknown (coord's
	// ErrAmbiguous).
	ClassAmbiguous ErrorClass = "ambiguous"
	// ClassNoLeader: refused for want of a leader or a quorum (coord:
	// ErrNoQuorum; etcd: "no leader").
	ClassNoLeader ErrorClass = "no-leader"
	// ClassTimedOut: the member gave up waiting for the result (coord:
	// ErrTimeout; etcd: "request timed out", with or without "possibly
	// due to previous leader failure").
	ClassTimedOut ErrorClass = "timed-out"
	// ClassLeaderChanged: etcd's "leader changed".
	ClassLeaderChanged ErrorClass = "leader-changed"
	// ClassStopped: the member called had stopped or closed.
	ClassStopped ErrorClass = "stopped"
	// ClassLimit: the bench's own limit on the call ran out (its context's
	// deadline): the call did not return by itself.
	ClassLimit ErrorClass = "bench-limit"
	// ClassOther is every other error.
	ClassOther ErrorClass = "other"
)

// ErrorClasses lists every class, in the order reports show them.
var ErrorClasses = []ErrorClass{ClassAmbiguous, ClassNoLeader, ClassTimedOut, ClassLeaderChanged, ClassStopped, ClassLimit, ClassOther}

// Classifier is implemented by cells and members that tell their errors
// apart.
type Classifier interface {
	// Classify returns err's class; err is not nil.
	Classify(err error) ErrorClass
}

// Classify returns the class of err, an error of an operation whose
// context was ctx, from x (a Cell or a Member) when it is a Classifier.
// An error after ctx ended is ClassLimit whatever it says; ErrStopped is
// ClassStopped; anything else x cannot name is ClassOther.
func Classify(ctx context.Context, x any, err error) ErrorClass {
	switch c, ok := x.(Classifier); {
	case ctx.Err() != nil:
		return ClassLimit
	case errors.Is(err, ErrStopped):
		return ClassStopped
	case ok:
		return c.Classify(err)
	}
	return ClassOther
}

// Leads is implemented by members that say whether they lead the cell.
type Leads interface {
	// Leads reports whether this member is the Raft leader, as its own
	// status says.
	Leads() bool
}

// GracefulCloser is implemented by members whose Close is not their
// ordinary, graceful shutdown (etcd's Member.Close hard-stops).
type GracefulCloser interface {
	// CloseGracefully closes the member as its side's ordinary shutdown
	// does, handing leadership over first. Close after it does nothing.
	CloseGracefully() error
}
