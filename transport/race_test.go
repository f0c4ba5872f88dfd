//go:build race

package transport

// sync.Pool drops items at random under the race detector, so allocation
// counts mean nothing there.
func init() { raceEnabled = true }
