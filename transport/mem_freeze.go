package transport

import "time"

// The in-memory transport's side of Network.Pause (Freezer).

// Frozen implements Freezer.
func (t *memTransport) Frozen() (bool, <-chan struct{}) {
	t.freezeMu.Lock()
	defer t.freezeMu.Unlock()
	if t.changed == nil {
		t.changed = make(chan struct{})
		t.settled = make(chan struct{})
	}
	t.following = true
	return t.frozen, t.changed
}

// Settled implements Freezer.
func (t *memTransport) Settled(frozen bool) {
	t.freezeMu.Lock()
	defer t.freezeMu.Unlock()
	if t.frozen == frozen && t.settled != nil {
		select {
		case <-t.settled:
		default:
			close(t.settled)
		}
	}
}

// setFrozen changes the state and, if a member follows it, waits until
// the member has settled (or the transport closed, or 10 s passed).
func (t *memTransport) setFrozen(frozen bool) {
	t.freezeMu.Lock()
	if t.frozen == frozen {
		t.freezeMu.Unlock()
		return
	}
	t.frozen = frozen
	if t.changed != nil {
		close(t.changed)
	}
	t.changed = make(chan struct{})
	t.settled = make(chan struct{})
	settled, following := t.settled, t.following
	t.freezeMu.Unlock()
	if following {
		// A member that stopped (failed without closing its transport)
		// never settles: do not wait for it forever.
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-settled:
		case <-t.done:
		case <-timer.C:
		}
	}
}
