package client

import (
	"context"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/spi"
)

// The rest of spi.Backend.

// Keeper keeps the client's sessions alive.
func (c *Client) Keeper() spi.Keeper { return c.ka }

// Probes counts queue waits for the root's tests.
func (c *Client) Probes() *spi.Probes { return &c.probes }

// Stats is nil: a client has no metrics.
func (c *Client) Stats() *spi.SessionStats { return nil }

// Resumable asks the member, which checks the owner: it tells the TTL
// (and so lets the resume go on) only for a session of this client's
// identity, so another client's session, or a member's, is ErrForbidden
// and nothing changes.
func (c *Client) Resumable(ctx context.Context, id int64) (time.Duration, int64, error) {
	ttl, err := c.ka.grantedTTL(ctx, id)
	if err != nil {
		return 0, 0, fmt.Errorf("resuming session %d: %w", id, err)
	}
	// A linearizable read for a revision at least that of every key the
	// earlier holder made; the prefix is one no recipe uses, so the read
	// returns next to nothing.
	_, rev, err := c.List(ctx, resumeRevProbe, spi.ReadOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("resuming session %d: %w", id, err)
	}
	return ttl, rev, nil
}

// resumeRevProbe is the prefix a client reads to learn a current
// revision.
const resumeRevProbe = "\x00coord/resume/"

// TimeToLive asks the client's member, which asks the leader.
func (c *Client) TimeToLive(ctx context.Context, id int64) (time.Duration, error) {
	return c.ka.timeToLive(ctx, id)
}
