package client

import (
	"context"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
)

// Failover: a client keeps one connection to one member, watches it, and
// moves to another member when that one fails, cannot serve (it ends the
// connection or refuses it, client_serve_guard.go), stops answering, or
// leaves keep-alives unanswered past what its sessions can afford.

// supervise keeps the client connected: it pings the member, and when
// the connection ends (or the member stops answering pings or
// keep-alives) it connects to the next member, until Close.
func (c *Client) supervise(conn *clientwire.ClientConn) {
	for {
		c.monitor(conn)
		if c.life.Err() != nil {
			return
		}
		c.mu.Lock()
		c.conn = nil
		c.ready = make(chan struct{})
		close(c.cleared)
		left := c.addr
		c.mu.Unlock()
		c.log.Info("lost its member; connecting to another", "member", conn.Welcome().Member, "err", conn.Err())
		for failed := 0; ; failed++ {
			var err error
			conn, err = c.dialRound(c.life, left)
			if err == nil {
				if failed > 0 {
					c.log.Info("a member accepted again", "member", conn.Welcome().Member, "rounds_failed", failed)
				}
				break
			}
			if c.life.Err() != nil {
				return
			}
			// Once per outage: rounds go every quarter election timeout.
			if failed == 0 {
				c.log.Warn("no member reachable or able to serve; retrying", "err", err)
			} else {
				c.log.Debug("no member reachable or able to serve; retrying", "err", err)
			}
			// A quarter election timeout: members that cannot serve (no
			// leader yet) refuse until one is elected, and the sessions'
			// keep-alives wait for this.
			select {
			case <-time.After(c.ElectionTimeout() / 4):
			case <-c.life.Done():
				return
			}
		}
		c.setConn(conn)
		c.ka.reconnected()
		c.learnMembers(c.life, conn)
	}
}

// monitor pings conn every half election timeout until it ends; it ends
// it when a ping goes unanswered for two election timeouts with nothing
// else from the member meanwhile, when the
// keep-alives stall (see clientKeeper.stalled), when a session would
// expire unless the client moves now (clientKeeper.endangered), or at
// Close. It looks every quarter election timeout.
func (c *Client) monitor(conn *clientwire.ClientConn) {
	et := c.ElectionTimeout()
	t := time.NewTicker(et / 4)
	defer t.Stop()
	var pinged chan error
	for ticks := 1; ; ticks++ {
		select {
		case <-conn.Done():
			return
		case <-c.life.Done():
			_ = conn.Close()
			return
		case <-t.C:
		}
		if c.ka.stalled(time.Now()) {
			c.log.Info("keep-alives unanswered by the member; moving on", "member", conn.Welcome().Member)
			_ = conn.Close()
			return
		}
		if c.ka.endangered(time.Now()) {
			c.log.Info("sessions near expiry and the member does not answer their keep-alives; moving on",
				"member", conn.Welcome().Member)
			_ = conn.Close()
			return
		}
		if ticks%2 == 1 {
			continue // pings every other tick, the checks above at each
		}
		select {
		case err := <-pinged: // nil: no ping out, never ready
			pinged = nil
			if err != nil && c.life.Err() == nil && conn.Err() == nil {
				// A ping waits for one of the member's in-flight places
				// and for the answers queued before its own: a member
				// busy with this client's requests (a thousand watches
				// resuming) answers late but keeps sending. Only a
				// member silent for the whole ping is left; moving off a
				// busy one would only bring its load to the next.
				if silent := time.Since(conn.LastFrame()); silent < 2*et {
					c.log.Debug("member slow to answer a ping, but sending; staying", "member", conn.Welcome().Member,
						"silent", silent)
					break
				}
				c.log.Info("member stopped answering pings; moving on", "member", conn.Welcome().Member, "err", err)
				_ = conn.Close()
				return
			}
		default:
		}
		if pinged == nil {
			// A ping runs beside the checks, so that a member slow to
			// answer does not keep them from running.
			done := make(chan error, 1)
			pinged = done
			c.wg.Go(func() {
				ctx, cancel := context.WithTimeout(c.life, 2*et)
				defer cancel()
				done <- conn.Ping(ctx)
			})
		}
		if ticks%(2*clientLearnEvery) == 0 {
			c.learnMembers(c.life, conn)
		}
	}
}

// next is what a request's answer through one member leaves to do.
type next int

const (
	// nextAnswered: the request has its answer (a result or a final
	// error).
	nextAnswered next = iota
	// nextNow: again at once, on the same connection if it lives (a
	// watch that ended on a member that still serves), else the next.
	nextNow
	// nextPause: the member ended the request without ending the
	// connection (it is leaving); a moment, then again, through it or
	// the next member.
	nextPause
	// nextMember: the connection ended under the request, or its member
	// is closing; again through the next member once this connection
	// ends.
	nextMember
)

// failover is the one failover loop of the client's requests and
// watches: it runs send on the current member's connection and, as
// send's answer says, returns send's error or runs it again: at once,
// after a pause, or on the next member's connection. Each caller judges
// its own answers (whether a write may have reached the cell, how often
// a read is repeated, where a watch resumes); the waiting between
// attempts is the same for all. When no connection comes (current's
// error: errs.Closed, or errs.NoQuorum wrapping ctx's) or ctx ends while
// it waits, it returns giveUp of that error.
func (c *Client) failover(ctx context.Context, giveUp func(error) error, send func(*clientwire.ClientConn) (next, error)) error {
	for {
		conn, err := c.current(ctx)
		if err != nil {
			return giveUp(err)
		}
		n, err := send(conn)
		if done, err := c.carryOut(ctx, conn, n, err, giveUp); done {
			return err
		}
	}
}

// carryOut does what an attempt on conn said should come next (n, with
// the attempt's err): wait for the connection's end, or a moment, or
// nothing. It reports whether the request is done, and then with what.
func (c *Client) carryOut(ctx context.Context, conn *clientwire.ClientConn, n next, err error, giveUp func(error) error) (bool, error) {
	switch n {
	case nextAnswered:
		return true, err
	case nextPause:
		err = c.pause(ctx, conn)
	case nextMember:
		err = waitConnEnd(ctx, conn)
	}
	if err != nil {
		return true, giveUp(err)
	}
	return false, nil
}

// pause waits for conn to end or a tenth of an election timeout, whichever
// is first: a member that ended a request without ending the connection
// is given a moment before the request goes to it, or the next, again.
func (c *Client) pause(ctx context.Context, conn *clientwire.ClientConn) error {
	t := time.NewTimer(c.ElectionTimeout() / 10)
	defer t.Stop()
	select {
	case <-conn.Done():
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// waitConnEnd waits until conn ends (a closing member closes every
// client connection), so that the next Client.current returns the next
// member's; it returns ctx's error if ctx ends first.
func waitConnEnd(ctx context.Context, conn *clientwire.ClientConn) error {
	select {
	case <-conn.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
