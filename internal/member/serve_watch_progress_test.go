package member

import (
	"testing"
	"time"
)

// A client names its watches' progress interval: the member serves it in
// whole election timeouts, never under one, never past a day.
func TestProgressEveryBoundsWhatAClientAsks(t *testing.T) {
	const et = time.Second
	for _, c := range []struct{ asked, want time.Duration }{
		{0, 0},
		{-time.Second, 0},
		{time.Nanosecond, et},
		{et, et},
		{et + 1, 2 * et},
		{2500 * time.Millisecond, 3 * et},
		{1<<63 - 1, 24 * time.Hour},
	} {
		if got := progressEvery(c.asked, et); got != c.want {
			t.Errorf("progressEvery(%v, %v) = %v, want %v", c.asked, et, got, c.want)
		}
	}
}
