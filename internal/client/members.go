package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/errs"
)

// A client learns the cell's client addresses from its member (Members,
// protocol version 3) when it connects, and again every
// clientLearnEvery pings, and tries them after its configured members
// when it has to move: a cell that grew or replaced members stays
// reachable when every configured member is gone.
//
// What a member answers is hostile input. The wire bounds it (count,
// length, printable); here each address must also be one the client can
// dial (host:port when it dials TCP), the list is capped, and it only
// ever adds addresses to try after the configured ones, never replaces
// them. A learned address earns no trust: the member there must pass the
// same TLS handshake as any other.

// clientLearnEvery is how many pings (half an election timeout apart)
// pass between two refreshes of the learned addresses.
const clientLearnEvery = 20

// learnMembers asks conn's member for the cell's client addresses and
// merges them into the learned ones. A member of an older version is
// not asked; a failure leaves what was learned before.
func (c *Client) learnMembers(ctx context.Context, conn *clientwire.ClientConn) {
	if conn.Welcome().Version < clientwire.MembersVersion {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.ElectionTimeout())
	defer cancel()
	addrs, err := conn.Members(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			c.log.Debug("member addresses not learned", "member", conn.Welcome().Member, "err", err)
		}
		return
	}
	c.mu.Lock()
	c.learned = mergeLearned(c.cfg.Members, addrs, c.learned, c.cfg.Dial == nil)
	c.mu.Unlock()
}

// mergeLearned returns the addresses to try after the configured ones:
// the member's newest answer first (valid ones, not configured, once
// each), then those learned before that it no longer lists (a member
// may have a partial view), at most clientwire.MaxMemberAddrs in all.
func mergeLearned(configured, answer, before []string, tcp bool) []string {
	out := make([]string, 0, min(len(answer)+len(before), clientwire.MaxMemberAddrs))
	for _, list := range [][]string{answer, before} {
		for _, a := range list {
			if len(out) == clientwire.MaxMemberAddrs {
				return out
			}
			if checkLearnedAddr(a, tcp) != nil || slices.Contains(configured, a) || slices.Contains(out, a) {
				continue
			}
			out = append(out, a)
		}
	}
	return out
}

// checkLearnedAddr checks an address a member gave: the wire's bounds,
// and, when the client dials TCP, a host and a port.
func checkLearnedAddr(a string, tcp bool) error {
	if err := clientwire.CheckMemberAddr(a); err != nil {
		return err
	}
	if !tcp {
		return nil // ClientConfig.Dial decides what its addresses mean
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%w: member address %q is not host:port", errs.InvalidArgument, a)
	}
	return nil
}

// candidates lists the addresses of one dial round: every configured
// member, from the one after the member last connected to in the
// shuffled order, then the learned ones; avoid (the member just left)
// goes last, tried only if no other accepts.
func (c *Client) candidates(avoid string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.order)+len(c.learned))
	for i := range c.order {
		out = append(out, c.order[(c.next+i)%len(c.order)])
	}
	out = append(out, c.learned...)
	if i := slices.Index(out, avoid); avoid != "" && i >= 0 {
		out = append(slices.Delete(out, i, i+1), avoid)
	}
	return out
}

// connectedTo records that the client connected to addr: the next round
// starts after it in the configured order.
func (c *Client) connectedTo(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addr = addr
	if i := slices.Index(c.order, addr); i >= 0 {
		c.next = i + 1
	}
}

// Learned returns the client addresses the client learned from its
// members, which it tries after ClientConfig.Members.
func (c *Client) Learned() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.learned)
}
