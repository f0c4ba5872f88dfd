package cell

import (
	"context"
	"fmt"
	"time"
)

// AwaitWrite retries a small write through every member in turn until one
// commits: the cell has a leader and a quorum. ctx bounds the wait.
func AwaitWrite(ctx context.Context, c Cell) error {
	for i := 0; ; i++ {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Put(actx, i%Members, "bench/ready", []byte("ready"))
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s cell: no write committed: %w", c.Side(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
