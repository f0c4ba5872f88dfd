package coord

// Lock-delay: the recipe's option, and the member's answer to the
// sessions leader, which times the markers (internal/sessions) that the
// state machine writes (storage).

import (
	"time"

	"github.com/coordcell/coord/internal/lockq"
	"github.com/coordcell/coord/internal/sessions"
)

// MaxLockDelay is the longest lock-delay WithLockDelay accepts.
const MaxLockDelay = lockq.MaxLockDelay

// MutexOption configures NewMutex (and NewLocker).
type MutexOption func(*mutexOptions)

type mutexOptions struct {
	delay    time.Duration
	delaySet bool
}

// WithLockDelay asks for a lock-delay of d (Chubby's, Consul's
// lock-delay): when the session of a hold taken by this Mutex expires
// (the cell decided it had ended: not Close, not Unlock), nobody is
// granted the lock for d afterwards, so writes the lost holder still
// had in flight land before the next holder's. It is for resources that
// cannot check a fencing token; one that can should (Fence), which needs
// no wait.
//
// The delay is written in the hold's key, and at the expiry the cell puts
// a marker under the lock's queue (locks/{name}/d…) that every waiter,
// older or newer, treats as a holder; the sessions leader deletes it d
// after it saw it applied. A change of leader restarts the delay from the
// new leader's election, so it is never shorter than d and may be up to
// d plus a few election timeouts longer. The marker is part of the
// replicated state: it survives restarts and snapshots. Deleting it by
// hand ends the delay at once.
//
// The delay follows any expiry: one decided by the cell's leader, and one
// that the holder's own member proposes when its local deadline passed
// first.
//
// d must be in (0, MaxLockDelay]; otherwise Lock and TryLock fail with
// ErrInvalidArgument. Only Mutex (and NewLocker) take it; a delay left by
// a Mutex also holds off RWMutex and Semaphore acquisitions of the same
// name. An expiry that leaves a delay is written in a command format that
// members of earlier builds refuse (they stop applying until upgraded,
// rather than disagree), so upgrade every member before relying on it.
func WithLockDelay(d time.Duration) MutexOption {
	return func(o *mutexOptions) { o.delay, o.delaySet = d, true }
}

// LockDelays lists the lock-delay markers in this member's applied state,
// for the sessions leader.
func (c leaderCell) LockDelays() ([]sessions.LockDelay, error) {
	ds, err := c.e.n.sm.LockDelays()
	if err != nil {
		return nil, err
	}
	out := make([]sessions.LockDelay, len(ds))
	for i, d := range ds {
		out[i] = sessions.LockDelay{Key: d.Key, CreateRev: d.CreateRev, Delay: d.Delay}
	}
	return out, nil
}

// SessionLockDelayed reports whether session id holds a lock key that
// asks for a lock-delay, so that its expiry is proposed flagged.
func (c leaderCell) SessionLockDelayed(id int64) bool { return c.e.n.sessionLockDelayed(id) }

// sessionLockDelayed reports whether session id holds, in this member's
// applied state, a lock key that asks for a lock-delay: whoever proposes
// its expiry sets command.Session.LockDelay from it.
func (n *Node) sessionLockDelayed(id int64) bool {
	delayed, err := n.sm.SessionLockDelayed(id)
	return err == nil && delayed
}
