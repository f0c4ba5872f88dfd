package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
)

// A client's reads: a key, a page of a prefix, a transaction without
// writes. Each changes nothing, so each is sent again through the next
// member when its connection ends under it.

// proposeRead sends a transaction without writes, which the member
// serves as a read, never through the log: like a read it is sent again
// through the next member when its connection ends under it, and its
// outcome is never ambiguous, since it changes nothing.
func (c *Client) proposeRead(ctx context.Context, data []byte) (command.Result, error) {
	var res *clientwire.ProposeResult
	err := c.retryRead(ctx, func(conn *clientwire.ClientConn) (err error) {
		res, err = conn.Propose(ctx, data)
		return err
	})
	if err != nil {
		return command.Result{}, err
	}
	if err := spi.ResultErr(&command.Command{}, res.Result); err != nil {
		return res.Result, err
	}
	return res.Result, nil
}

// read sends r, retrying once on another member when the connection
// ended under it (a read changes nothing, so it can be repeated).
func (c *Client) read(ctx context.Context, r *clientwire.Read) (*clientwire.ReadResult, error) {
	var res *clientwire.ReadResult
	err := c.retryRead(ctx, func(conn *clientwire.ClientConn) (err error) {
		res, err = conn.Read(ctx, r)
		return err
	})
	return res, err
}

// retryRead runs send, a request that changes nothing, on the current
// connection, and once more on the next member's when the connection
// ended under it.
func (c *Client) retryRead(ctx context.Context, send func(*clientwire.ClientConn) error) error {
	attempt := 0
	noQuorum := func(err error) error {
		if errors.Is(err, errs.NoQuorum) || errors.Is(err, errs.Closed) {
			return err // current's own: no member connected, or closed
		}
		return fmt.Errorf("%w: %w", errs.NoQuorum, err)
	}
	return c.failover(ctx, noQuorum, func(conn *clientwire.ClientConn) (next, error) {
		defer func() { attempt++ }()
		err := send(conn)
		if err == nil {
			return nextAnswered, nil
		}
		var we *clientwire.Error
		switch {
		case errors.As(err, &we) && we.Code == clientwire.CodeCanceled && ctx.Err() == nil:
			// The member ended the request itself, not our ctx: it is
			// dropping the connection or stopping. A read can be repeated.
			if attempt > 0 {
				return nextAnswered, fmt.Errorf("%w: member ended the read: %w", errs.NoQuorum, err)
			}
			return nextPause, nil
		case errors.As(err, &we) && we.Code == clientwire.CodeCanceled:
			// Our ctx ended: a read is not ambiguous, only unanswered.
			return nextAnswered, fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
		case errors.As(err, &we) && !clientwire.MemberClosing(err):
			return nextAnswered, clientwire.ErrorOf(we.Code, we.Message)
		case errors.Is(err, clientwire.ErrVersion):
			// Asked nothing of the member, which cannot serve it.
			return nextAnswered, fmt.Errorf("%w: %w", errs.InvalidArgument, err)
		case ctx.Err() != nil:
			return nextAnswered, fmt.Errorf("%w: %w", errs.NoQuorum, ctx.Err())
		case attempt > 0:
			return nextAnswered, fmt.Errorf("%w: connection to member ended: %w", errs.NoQuorum, err)
		}
		// Ended or closing: the next current() waits for the next member.
		return nextMember, nil
	})
}

func (c *Client) Get(ctx context.Context, key string, o spi.ReadOptions) (command.KV, bool, error) {
	if o.Ranged() {
		kvs, _, err := c.readRange(ctx, &clientwire.Read{Key: key, Serializable: o.Serializable}, o)
		if err != nil || len(kvs) == 0 {
			return command.KV{}, false, err
		}
		return kvs[0], true, nil
	}
	if o.Serializable {
		if kv, ok, hit := c.cache.get(ctx, key); hit {
			return kv, ok, nil
		}
	}
	res, err := c.read(ctx, &clientwire.Read{Key: key, Serializable: o.Serializable})
	if err != nil {
		return command.KV{}, false, err
	}
	for _, kv := range res.KVs {
		if kv.Key == key {
			return kv, true, nil
		}
	}
	return command.KV{}, false, nil
}

func (c *Client) List(ctx context.Context, prefix string, o spi.ReadOptions) ([]command.KV, int64, error) {
	if o.Ranged() {
		return c.readRange(ctx, &clientwire.Read{Key: prefix, Prefix: o.End == "", Serializable: o.Serializable,
			After: o.After, Limit: uint32(o.Limit)}, o)
	}
	if o.Serializable {
		if kvs, rev, hit := c.cache.list(ctx, prefix, o); hit {
			return kvs, rev, nil
		}
	}
	res, err := c.read(ctx, &clientwire.Read{Key: prefix, Prefix: true, Serializable: o.Serializable,
		After: o.After, Limit: uint32(o.Limit)})
	if err != nil {
		return nil, 0, err
	}
	return res.KVs, res.Rev, nil
}

// readRange sends r as a ranged read with o's options (never from the
// cache, which holds only the current state) and fills o.Counted. A
// member too old for them answers nothing: the read fails with
// ErrInvalidArgument rather than ignore an option.
func (c *Client) readRange(ctx context.Context, r *clientwire.Read, o spi.ReadOptions) ([]command.KV, int64, error) {
	r.Ranged = true
	r.Range = clientwire.RangeOptions{End: o.End, Rev: o.Rev, KeysOnly: o.KeysOnly, CountOnly: o.CountOnly,
		Count: o.Counted != nil, SortTarget: o.SortTarget, SortDescend: o.SortDescend,
		MinModRev: o.MinModRev, MaxModRev: o.MaxModRev, MinCreateRev: o.MinCreateRev, MaxCreateRev: o.MaxCreateRev}
	res, err := c.read(ctx, r)
	switch {
	case err != nil:
		return nil, 0, err
	case res.CompactRev != 0:
		return nil, 0, &spi.CompactedError{Oldest: res.CompactRev}
	}
	if o.Counted != nil {
		*o.Counted = res.Count
	}
	return res.KVs, res.Rev, nil
}
