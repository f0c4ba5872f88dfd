package lockq

// Lock-delay values: a lock key whose hold is followed by a delay when
// its session expires carries the delay in its value; the marker the
// cell writes at the expiry (Entry.Marker) carries the same value.

import (
	"strconv"
	"strings"
	"time"
)

// MaxLockDelay bounds a lock-delay: a value asking for more is not one,
// so a stray or hostile key cannot keep a lock from being granted for
// long.
const MaxLockDelay = 60 * time.Second

// delayTag starts a lock-delay value: no semaphore limit (digits only)
// and no empty mutex value begins with it.
const delayTag = "lock-delay:"

// DelayValue returns the value of a lock key whose hold is followed by a
// delay of d when its session expires.
func DelayValue(d time.Duration) []byte {
	return strconv.AppendInt([]byte(delayTag), int64(d), 10)
}

// ParseDelay returns the delay a lock key's value asks for; ok is false
// when the value asks for none, or for one outside (0, MaxLockDelay].
func ParseDelay(v []byte) (d time.Duration, ok bool) {
	rest, found := strings.CutPrefix(string(v), delayTag)
	if !found || len(rest) == 0 || len(rest) > 19 {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n <= 0 || time.Duration(n) > MaxLockDelay || strconv.FormatInt(n, 10) != rest {
		return 0, false
	}
	return time.Duration(n), true
}

// MarkerDelay is the delay a marker's value stands for: a value that is
// not a valid delay (someone overwrote it) counts as MaxLockDelay, so the
// marker still ends.
func MarkerDelay(v []byte) time.Duration {
	if d, ok := ParseDelay(v); ok {
		return d
	}
	return MaxLockDelay
}
