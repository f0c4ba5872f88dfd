package coord

import (
	"context"
	"fmt"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
)

// clientBackend is a client as the Cell API sees it (spi.Backend): every
// request forwarded to its member.
type clientBackend struct{ c *Client }

var _ spi.Backend = clientBackend{}

func (b clientBackend) Propose(ctx context.Context, cmd *command.Command) (command.Result, error) {
	return b.c.propose(ctx, cmd)
}

func (b clientBackend) Get(ctx context.Context, key string, o spi.ReadOptions) (command.KV, bool, error) {
	return b.c.get(ctx, key, o)
}

func (b clientBackend) List(ctx context.Context, prefix string, o spi.ReadOptions) ([]command.KV, int64, error) {
	return b.c.list(ctx, prefix, o)
}

func (b clientBackend) Watch(ctx context.Context, prefix string, o spi.WatchOptions, sink spi.Sink) {
	b.c.watch(ctx, prefix, o, sink)
}

func (b clientBackend) Settle(ctx context.Context) { b.c.settle(ctx) }

func (b clientBackend) ElectionTimeout() time.Duration { return b.c.electionTimeout() }

// Limits are bounds the client can check without knowing the member's
// configuration: nothing longer than the member reads in one frame can
// be sent. The member checks every request against its own limits (it
// trusts no client to) and answers the same sentinels a *Node returns,
// so a bad key or value fails the same way on both, one round trip later.
func (b clientBackend) Limits() spi.Limits { return b.c.inputLimits() }

func (b clientBackend) Keeper() spi.Keeper { return b.c.ka }

func (b clientBackend) Probes() *spi.Probes { return &b.c.probes }

func (b clientBackend) Stats() *spi.SessionStats { return nil }

// Resumable asks the member, which checks the owner: it tells the TTL
// (and so lets the resume go on) only for a session of this client's
// identity, so another client's session, or a member's, is ErrForbidden
// and nothing changes.
func (b clientBackend) Resumable(ctx context.Context, id int64) (time.Duration, int64, error) {
	ttl, err := b.c.ka.grantedTTL(ctx, SessionID(id))
	if err != nil {
		return 0, 0, fmt.Errorf("resuming session %d: %w", id, err)
	}
	// A linearizable read for a revision at least that of every key the
	// earlier holder made; the prefix is one no recipe uses, so the read
	// returns next to nothing.
	_, rev, err := b.c.list(ctx, resumeRevProbe, readOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("resuming session %d: %w", id, err)
	}
	return ttl, rev, nil
}

// resumeRevProbe is the prefix a client reads to learn a current
// revision.
const resumeRevProbe = "\x00coord/resume/"

func (b clientBackend) TimeToLive(ctx context.Context, id int64) (time.Duration, error) {
	return b.c.ka.timeToLive(ctx, SessionID(id))
}
